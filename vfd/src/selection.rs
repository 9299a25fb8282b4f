//! The selection callbacks' work (`read_selection`/`write_selection`): each entry's file and
//! memory selections, read through the calling HDF5's H5S functions (`dataspace`), become a
//! strided host transfer (a regular file selection against contiguous host memory, the common
//! case), or pieces walked from both sides in batches of [`BATCH`] for the host windows or, for
//! device buffers, the vector path, whose device transfers are the proven ones. A strided read
//! costs arithmetic per element instead of a vector entry, a pointer classification and a
//! scatter record per element.

use crate::abi::{haddr_t, hid_t, H5FD_mem_t};
use crate::cuda::PointerKind;
use crate::dataspace::{shape, Shape};
use crate::error::{Error, Result};
use crate::file::{check_region, OpenFile};
use crate::io::strided::{transfer_pieces, transfer_strided, Runs};
use crate::io::vector::Piece;
use crate::io::{BufPtr, Direction};
use crate::memory;
use h5gds_runtime::hdf5::space::SeqIter;
use h5gds_runtime::hdf5::Hdf5Library;

/// Pieces per batch on the iterator path.
pub const BATCH: usize = 16 << 10;

/// One selection of a request: a file dataspace at `offset`, a memory dataspace over `buf`.
pub struct Entry {
    pub mem_space: hid_t,
    pub file_space: hid_t,
    pub offset: u64,
    pub elem: usize,
    pub buf: usize,
}

/// The entries of a selection request, from HDF5's parallel arrays (an element size of 0 or a
/// null buffer means "the previous entry's", as in HDF5's own translation).
///
/// # Safety
/// The space and offset arrays must hold `count` entries, the size and buffer arrays entries up to
/// the first 0 (or `count`).
pub(crate) unsafe fn request_entries(
    count: usize,
    mem_spaces: *const hid_t,
    file_spaces: *const hid_t,
    offsets: *const haddr_t,
    element_sizes: *const usize,
    bufs: *const usize,
) -> Result<Vec<Entry>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if [
        mem_spaces.is_null(),
        file_spaces.is_null(),
        offsets.is_null(),
    ]
    .into_iter()
    .chain([element_sizes.is_null(), bufs.is_null()])
    .any(|null| null)
    {
        return Err(Error::InvalidArgument(
            "selection request with a null array".into(),
        ));
    }
    let mut entries: Vec<Entry> = Vec::with_capacity(count);
    // Once a size of 0 (or a null buffer) appears, the array may end there: HDF5 1.14 passes
    // two-entry arrays for requests of many chunks.
    let (mut elem, mut buf) = (None, None);
    let (mut elem_fixed, mut buf_fixed) = (false, false);
    for i in 0..count {
        if !elem_fixed {
            // SAFETY: entries up to the first 0 are present (the caller's contract).
            match (unsafe { *element_sizes.add(i) }, elem) {
                (0, None) => {
                    return Err(Error::InvalidArgument(
                        "selection request: element_sizes[0] is zero".into(),
                    ))
                }
                (0, Some(_)) => elem_fixed = true,
                (e, _) => elem = Some(e),
            }
        }
        if !buf_fixed {
            // SAFETY: entries up to the first null are present (the caller's contract).
            match (unsafe { *bufs.add(i) }, buf) {
                (0, None) => {
                    return Err(Error::InvalidArgument(
                        "selection request: bufs[0] is null".into(),
                    ))
                }
                (0, Some(_)) => buf_fixed = true,
                (b, _) => buf = Some(b),
            }
        }
        // SAFETY: the caller guarantees these arrays hold `count` entries.
        let (mem_space, file_space, offset) =
            unsafe { (*mem_spaces.add(i), *file_spaces.add(i), *offsets.add(i)) };
        entries.push(Entry {
            mem_space,
            file_space,
            offset,
            elem: elem.unwrap_or(0),
            buf: buf.unwrap_or(0),
        });
    }
    Ok(entries)
}

/// A source of (offset, length) sequences for one side of a selection.
enum Seqs<'a> {
    Strided(Runs<'a>),
    Hdf5(SeqIter<'a>),
}

impl Seqs<'_> {
    fn next_batch(&mut self, off: &mut [u64], len: &mut [usize]) -> Result<usize> {
        match self {
            Seqs::Hdf5(iter) => Ok(iter.next_batch(off, len)?),
            Seqs::Strided(runs) => Ok(runs.next_batch(off, len)),
        }
    }
}

fn seqs<'a>(api: &'a Hdf5Library, shape: &'a Shape, space: hid_t, elem: usize) -> Result<Seqs<'a>> {
    Ok(match shape {
        Shape::Strided(pat) => Seqs::Strided(Runs::new(pat)),
        _ => Seqs::Hdf5(api.selection_iter(space, elem)?),
    })
}

/// Walks the two sides together and hands `sink` the resulting pieces in batches.
fn zip_pieces(
    mut file: Seqs<'_>,
    mut mem: Seqs<'_>,
    entry: &Entry,
    mem_type: H5FD_mem_t,
    sink: &mut dyn FnMut(Vec<Piece>) -> Result<()>,
) -> Result<()> {
    const SEQ: usize = 1024;
    let (mut f_off, mut f_len) = ([0u64; SEQ], [0usize; SEQ]);
    let (mut m_off, mut m_len) = ([0u64; SEQ], [0usize; SEQ]);
    let (mut fi, mut fn_, mut mi, mut mn) = (0, 0, 0, 0);
    let mut pieces: Vec<Piece> = Vec::with_capacity(BATCH);
    loop {
        if fi == fn_ {
            fn_ = file.next_batch(&mut f_off, &mut f_len)?;
            fi = 0;
        }
        if mi == mn {
            mn = mem.next_batch(&mut m_off, &mut m_len)?;
            mi = 0;
        }
        match (fi < fn_, mi < mn) {
            (false, false) => break,
            (true, true) => {}
            _ => {
                return Err(Error::InvalidArgument(
                    "memory and file selections select different numbers of bytes".into(),
                ))
            }
        }
        let len = f_len[fi].min(m_len[mi]);
        let addr = entry.offset + f_off[fi];
        let buf = entry.buf + m_off[mi] as usize;
        match pieces.last_mut() {
            Some(last)
                if last.addr + last.len as u64 == addr && last.buf.addr() + last.len == buf =>
            {
                last.len += len
            }
            _ => pieces.push(Piece {
                addr,
                len,
                buf: BufPtr::new(buf as *mut u8),
                mem_type,
            }),
        }
        if pieces.len() == BATCH {
            sink(std::mem::replace(&mut pieces, Vec::with_capacity(BATCH)))?;
        }
        f_len[fi] -= len;
        f_off[fi] += len as u64;
        if f_len[fi] == 0 {
            fi += 1;
        }
        m_len[mi] -= len;
        m_off[mi] += len as u64;
        if m_len[mi] == 0 {
            mi += 1;
        }
    }
    if !pieces.is_empty() {
        sink(pieces)?;
    }
    Ok(())
}

/// The memory address and length of the contiguous memory side, if the memory selection is one
/// run.
fn contiguous_mem(shape: &Shape, buf: usize) -> Option<(usize, u64)> {
    match shape {
        Shape::Strided(pat) if pat.levels.is_empty() => {
            Some((buf + pat.base as usize, pat.run as u64))
        }
        _ => None,
    }
}

/// Reads (or writes) one selection entry.
///
/// # Safety
/// `entry.buf` must be valid for the bytes the memory selection covers.
unsafe fn transfer(
    file: &OpenFile,
    api: &Hdf5Library,
    entry: &Entry,
    mem_type: H5FD_mem_t,
    dir: Direction,
) -> Result<()> {
    // SAFETY: the caller's contract: `entry.buf` covers the memory selection.
    unsafe {
        let file_shape = shape(api, entry.file_space, entry.elem)?;
        let mem_shape = shape(api, entry.mem_space, entry.elem)?;
        if matches!(file_shape, Shape::Empty) && matches!(mem_shape, Shape::Empty) {
            return Ok(());
        }
        // One run of the file against contiguous memory, HDF5's request for a whole small
        // dataset: the file's single transfer, whose short way makes one `pread`/`pwrite` and
        // logs nothing (`OpenFile::transfer`).
        if let (Shape::Strided(pat), Some((mem, mem_bytes))) =
            (&file_shape, contiguous_mem(&mem_shape, entry.buf))
        {
            if pat.levels.is_empty() {
                if pat.run as u64 != mem_bytes {
                    return Err(Error::InvalidArgument(format!(
                        "memory selection holds {mem_bytes} bytes, file selection {}",
                        pat.run
                    )));
                }
                let buf = BufPtr::new(mem as *mut u8);
                return file.transfer(dir, entry.offset + pat.base, pat.run, buf, mem_type);
            }
        }
        crate::log::with_logging(|| {
            transfer_shapes(file, api, entry, mem_type, dir, file_shape, mem_shape)
        })
    }
}

/// `transfer` of an entry of any other shape, with the driver's logger current.
///
/// # Safety
/// As `transfer`.
unsafe fn transfer_shapes(
    file: &OpenFile,
    api: &Hdf5Library,
    entry: &Entry,
    mem_type: H5FD_mem_t,
    dir: Direction,
    file_shape: Shape,
    mem_shape: Shape,
) -> Result<()> {
    // SAFETY: the caller's contract: `entry.buf` covers the memory selection.
    unsafe {
        let host =
            memory::classify(BufPtr::new(entry.buf as *mut u8), mem_type)? == PointerKind::Host;
        if host {
            if let (Shape::Strided(pat), Some((mem, mem_bytes))) =
                (&file_shape, contiguous_mem(&mem_shape, entry.buf))
            {
                let bytes = pat.runs() * pat.run as u64;
                if bytes != mem_bytes {
                    return Err(Error::InvalidArgument(format!(
                        "memory selection holds {mem_bytes} bytes, file selection {bytes}"
                    )));
                }
                let start = entry.offset + pat.base;
                let len = pat.end() - pat.base;
                match dir {
                    Direction::Read => {
                        file.check(Direction::Read, start, len as usize)?;
                        if pat.levels.is_empty() {
                            // One run: the host path of a plain read (large ones split
                            // across the thread pool).
                            let buf = BufPtr::new(mem as *mut u8);
                            return file.host().transfer(dir, start, buf, len as usize);
                        }
                    }
                    Direction::Write => {
                        check_region(start, len, crate::abi::MAXADDR)?;
                    }
                }
                transfer_strided(&file.host(), entry.offset, pat, mem, dir)?;
                if dir == Direction::Write {
                    file.grow_eof(entry.offset + pat.end());
                }
                return Ok(());
            }
        }
        let fs = seqs(api, &file_shape, entry.file_space, entry.elem)?;
        let ms = seqs(api, &mem_shape, entry.mem_space, entry.elem)?;
        zip_pieces(fs, ms, entry, mem_type, &mut |pieces| match (dir, host) {
            (Direction::Read, true) => {
                for p in &pieces {
                    file.check(Direction::Read, p.addr, p.len)?;
                }
                transfer_pieces(&file.host(), pieces, dir)
            }
            (Direction::Write, true) => {
                for p in &pieces {
                    check_region(p.addr, p.len as u64, crate::abi::MAXADDR)?;
                }
                let end = pieces
                    .iter()
                    .map(|p| p.addr + p.len as u64)
                    .max()
                    .unwrap_or(0);
                transfer_pieces(&file.host(), pieces, dir)?;
                file.grow_eof(end);
                Ok(())
            }
            // Device buffers: the vector path, which moves device pieces (and checks ranges).
            (_, false) => file.transfer_vector(dir, pieces),
        })
    }
}

/// `read_selection` / `write_selection`: every entry moved between the file and its buffer.
///
/// # Safety
/// Each entry's buffer must be valid, in direction `dir`, for the bytes its memory selection
/// covers.
pub(crate) unsafe fn transfer_entries(
    file: &OpenFile,
    api: &Hdf5Library,
    entries: &[Entry],
    mem_type: H5FD_mem_t,
    dir: Direction,
) -> Result<()> {
    for entry in entries {
        // SAFETY: the caller's contract, entry by entry.
        unsafe { transfer(file, api, entry, mem_type, dir) }?;
    }
    Ok(())
}
