//! Strided host I/O: a regular file selection (every hyperslab h5py makes, and "all") is a
//! [`Strided`] pattern; against a contiguous memory range (h5py's case) it is read in windows of
//! at most `task_size` bytes, gaps of up to [`COALESCE_GAP`] read through, and gathered with a
//! copy specialised for the run length; windows run on the pool. Writes patch the same windows
//! (read, modify, write), as HDF5's sieve buffer does for sec2. Scattered host pieces (the vector
//! callbacks', and the selection callbacks' irregular selections) go through the same windows
//! (`transfer_pieces`). No HDF5 here: `crate::selection` turns HDF5's selections into these
//! patterns and pieces.

use super::host::{HostIo, COALESCE_GAP};
use super::parallel::{run_tasks, split};
use super::vector::{any_overlap, plan_reads, Piece};
use super::{posix, BufPtr, Direction};
use crate::error::{Error, Result};
use std::cell::RefCell;

/// Largest window read through and gathered (or patched), and so each thread's scratch memory.
/// Small enough to stay in cache between the read and the copy: measured on the 2-core VM, `x[::2]`
/// of 128 MiB took 0.029 s with 64 KiB windows and 0.043 s with 4 MiB ones.
const WINDOW: usize = 128 << 10;

/// File span of one pool job of a large strided transfer: small enough that two busy cores share
/// the work evenly, large enough that a job is many windows.
const JOB_SPAN: u64 = 1 << 20;

/// Runs at least this long are transferred in place, never through a window.
const DIRECT_RUN: usize = 256 << 10;

/// Gaps above this size are skipped (each run read in place) where the file's bytes are in the
/// page cache: there a run's own `pread` costs less than copying this many bytes of gap through
/// a window (measured on the 2-core VM: a 64x64 block of a 4096x4096 float32 matrix, runs 16 KiB
/// apart, 0.94x sec2 through windows, 1.34x in place; `x[::1024]`, runs 4 KiB apart, 1.71x through
/// windows, 1.25x in place). Up to `COALESCE_GAP`, storage that is not cached is still read
/// through windows: one large request instead of a request per run.
const CACHED_GAP: u64 = 8 << 10;

/// Whether the page cache holds the `len` bytes at `addr` of a local file without `O_DIRECT`,
/// asked by reading them into `buf` with no wait for a disk ([`posix::cached_read`]); false for
/// a remote file or an `O_DIRECT` one, which keep the windows.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
unsafe fn page_cached(host: &HostIo<'_>, addr: u64, buf: BufPtr, len: usize) -> bool {
    let local = host.remote.is_none() && host.direct_fd.is_none();
    // SAFETY: the caller's contract.
    local && unsafe { posix::cached_read(host.fd, buf, len, addr) }
}

/// A regular selection: runs of `run` bytes, at `base` plus the loop offsets of `levels`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strided {
    /// Byte offset of the first run from the start of the dataspace.
    pub base: u64,
    /// Bytes in each run.
    pub run: usize,
    /// Loops around the run, outermost first: (count, step in bytes). Empty for one run.
    pub levels: Vec<(u64, u64)>,
}

impl Strided {
    /// The pattern of a regular hyperslab (start, stride, count, block per dimension) in a
    /// row-major extent `dims` of `elem`-byte elements, simplified: loops of one iteration are
    /// dropped, a loop contiguous with the run lengthens the run, and nested loops that are one
    /// loop in disguise are merged.
    pub fn from_hyperslab(
        elem: usize,
        dims: &[u64],
        start: &[u64],
        stride: &[u64],
        count: &[u64],
        block: &[u64],
    ) -> Result<Strided> {
        let overflow = || Error::InvalidArgument("selection extent overflows".into());
        let rank = dims.len();
        // The whole extent (H5S_ALL, HDF5's selection for a whole small dataset): one run, with
        // no loop to simplify and so no allocation.
        let whole = (0..rank).all(|d| start[d] == 0 && count[d] == 1 && block[d] == dims[d]);
        if whole && dims.iter().all(|&n| n > 0) {
            let run = dims
                .iter()
                .try_fold(elem as u64, |acc, &n| acc.checked_mul(n))
                .and_then(|run| usize::try_from(run).ok())
                .ok_or_else(overflow)?;
            return Ok(Strided {
                base: 0,
                run,
                levels: Vec::new(),
            });
        }
        let mut pitch = vec![elem as u64; rank];
        for d in (0..rank.saturating_sub(1)).rev() {
            pitch[d] = pitch[d + 1].checked_mul(dims[d + 1]).ok_or_else(overflow)?;
        }
        let mut base = 0u64;
        let mut levels = Vec::with_capacity(2 * rank);
        for d in 0..rank {
            base = base
                .checked_add(start[d].checked_mul(pitch[d]).ok_or_else(overflow)?)
                .ok_or_else(overflow)?;
            let step = stride[d].checked_mul(pitch[d]).ok_or_else(overflow)?;
            levels.push((count[d], step));
            levels.push((block[d], pitch[d]));
        }
        levels.retain(|&(n, _)| n != 1);
        if levels.iter().any(|&(n, _)| n == 0) {
            return Err(Error::InvalidArgument(
                "empty hyperslab in a selection".into(),
            ));
        }
        let mut run = elem as u64;
        loop {
            while let Some(&(n, step)) = levels.last() {
                if step != run {
                    break;
                }
                run = run.checked_mul(n).ok_or_else(overflow)?;
                levels.pop();
            }
            let merge = (0..levels.len().saturating_sub(1))
                .find(|&i| levels[i].1 == levels[i + 1].0 * levels[i + 1].1);
            match merge {
                Some(i) => {
                    let (outer, inner) = (levels[i], levels[i + 1]);
                    levels[i] = (outer.0 * inner.0, inner.1);
                    levels.remove(i + 1);
                }
                None => break,
            }
        }
        Ok(Strided {
            base,
            run: usize::try_from(run).map_err(|_| overflow())?,
            levels,
        })
    }

    /// Number of runs.
    pub fn runs(&self) -> u64 {
        self.levels.iter().map(|&(n, _)| n).product()
    }

    /// Byte offset just past the last run.
    pub fn end(&self) -> u64 {
        self.base
            + self
                .levels
                .iter()
                .map(|&(n, step)| (n - 1) * step)
                .sum::<u64>()
            + self.run as u64
    }
}

/// A position in a [`Strided`] pattern: run index, per-level indices, byte offset.
#[derive(Clone, Debug)]
struct Cursor<'a> {
    pat: &'a Strided,
    k: u64,
    idx: Vec<u64>,
    off: u64,
}

impl<'a> Cursor<'a> {
    fn at(pat: &'a Strided, k: u64) -> Self {
        let mut idx = vec![0; pat.levels.len()];
        let mut rest = k;
        let mut off = pat.base;
        for (l, &(n, step)) in pat.levels.iter().enumerate().rev() {
            idx[l] = rest % n;
            rest /= n;
            off += idx[l] * step;
        }
        Cursor { pat, k, idx, off }
    }

    /// Runs left in the innermost loop from here (at least 1); 1 when there are no loops.
    fn left_in_row(&self) -> u64 {
        match self.pat.levels.last() {
            Some(&(n, _)) => n - self.idx[self.idx.len() - 1],
            None => 1,
        }
    }

    /// Moves `m` runs on, `m` at most `left_in_row()`.
    fn advance(&mut self, m: u64) {
        self.k += m;
        let Some(last) = self.idx.len().checked_sub(1) else {
            return;
        };
        let (n, step) = self.pat.levels[last];
        self.idx[last] += m;
        self.off += m * step;
        if self.idx[last] < n {
            return;
        }
        // Carry into the outer loops.
        self.off -= n * step;
        self.idx[last] = 0;
        for l in (0..last).rev() {
            let (n, step) = self.pat.levels[l];
            self.idx[l] += 1;
            self.off += step;
            if self.idx[l] < n {
                return;
            }
            self.idx[l] = 0;
            self.off -= n * step;
        }
    }
}

/// The runs of a [`Strided`] pattern as (offset, length) sequences, in batches (the selection
/// callbacks walk a regular side this way against an irregular other side).
pub(crate) struct Runs<'a> {
    cur: Cursor<'a>,
}

impl<'a> Runs<'a> {
    pub(crate) fn new(pat: &'a Strided) -> Self {
        Runs {
            cur: Cursor::at(pat, 0),
        }
    }

    /// Fills `off`/`len` with the next runs; returns how many (0 at the end).
    pub(crate) fn next_batch(&mut self, off: &mut [u64], len: &mut [usize]) -> usize {
        let mut n = 0;
        while n < off.len() && self.cur.k < self.cur.pat.runs() {
            off[n] = self.cur.off;
            len[n] = self.cur.pat.run;
            self.cur.advance(1);
            n += 1;
        }
        n
    }
}

/// Moves the bytes of the file pattern `pat` (of a dataspace starting at file address
/// `file_base`) to or from the contiguous memory at `mem`, through windows or in place.
///
/// # Safety
/// The memory range of the pattern must be valid for the transfer.
pub(crate) unsafe fn transfer_strided(
    host: &HostIo<'_>,
    file_base: u64,
    pat: &Strided,
    mem: usize,
    dir: Direction,
) -> Result<()> {
    let mut job = StridedJob {
        host,
        file_base,
        pat,
        mem,
        dir,
        in_place: false,
    };
    // SAFETY: the caller's contract: the pattern's memory range is valid for the transfer.
    job.in_place = unsafe { job.in_place() };
    // SAFETY: the caller's contract.
    unsafe { job.run() }
}

/// Copies `count` runs of `run` bytes, `step` apart at `src`, to consecutive runs at `dst`
/// (`gather`), or the other way round (`scatter`).
///
/// # Safety
/// Both ranges must be valid and disjoint for the bytes the loop touches.
unsafe fn strided_copy(
    gather: bool,
    dst: *mut u8,
    src: *const u8,
    run: usize,
    step: usize,
    count: usize,
) {
    // SAFETY: the caller's contract: both ranges valid and disjoint for every run the loop touches.
    unsafe {
        macro_rules! typed {
            ($t:ty) => {
                for j in 0..count {
                    let (d, s) = if gather {
                        (dst.add(j * run), src.add(j * step))
                    } else {
                        (dst.add(j * step), src.add(j * run))
                    };
                    d.cast::<$t>()
                        .write_unaligned(s.cast::<$t>().read_unaligned());
                }
            };
        }
        match run {
            1 => typed!(u8),
            2 => typed!(u16),
            4 => typed!(u32),
            8 => typed!(u64),
            16 => typed!(u128),
            _ => {
                for j in 0..count {
                    let (d, s) = if gather {
                        (dst.add(j * run), src.add(j * step))
                    } else {
                        (dst.add(j * step), src.add(j * run))
                    };
                    std::ptr::copy_nonoverlapping(s, d, run);
                }
            }
        }
    }
}

thread_local! {
    /// Each thread's window buffer, kept between requests (a fresh one would be page-faulted in
    /// every time).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Host I/O of one strided file pattern against a contiguous memory range.
struct StridedJob<'a> {
    host: &'a HostIo<'a>,
    /// File address of the dataspace's first byte.
    file_base: u64,
    pat: &'a Strided,
    /// Memory address of the first run's bytes.
    mem: usize,
    dir: Direction,
    /// Runs moved one by one in place rather than through windows ([`StridedJob::in_place`]).
    in_place: bool,
}

impl StridedJob<'_> {
    /// Whether runs are moved one by one in place rather than in windows: long runs, runs far
    /// apart, and runs [`CACHED_GAP`] apart or more that a read finds in the page cache (the
    /// first run read there, asked not to wait for a disk).
    ///
    /// # Safety
    /// The memory range of the pattern must be valid for the transfer.
    unsafe fn in_place(&self) -> bool {
        let Some(&(_, step)) = self.pat.levels.last() else {
            return true;
        };
        let gap = step - self.pat.run as u64;
        if self.pat.run >= DIRECT_RUN || gap > COALESCE_GAP {
            return true;
        }
        gap > CACHED_GAP
            && self.dir == Direction::Read
            // SAFETY: the first run's memory, valid for the read (the caller's contract).
            && unsafe {
                let (addr, first) = (self.file_base + self.pat.base, self.mem as *mut u8);
                page_cached(self.host, addr, BufPtr::new(first), self.pat.run)
            }
    }

    /// One run, in place.
    ///
    /// # Safety
    /// The memory range of the pattern must be valid for the transfer.
    unsafe fn one_run(&self, io: &HostIo<'_>, cur: &Cursor<'_>) -> Result<()> {
        // SAFETY: the caller's contract for the job's memory range.
        unsafe {
            let addr = self.file_base + cur.off;
            let mem = self.mem + cur.k as usize * self.pat.run;
            match self.dir {
                Direction::Read => io.transfer(
                    Direction::Read,
                    addr,
                    BufPtr::new(mem as *mut u8),
                    self.pat.run,
                ),
                Direction::Write => io.transfer(
                    Direction::Write,
                    addr,
                    BufPtr::from_const(mem as *const u8),
                    self.pat.run,
                ),
            }
        }
    }

    /// Runs `k0..k1`, on the calling thread.
    ///
    /// # Safety
    /// The memory range of the pattern must be valid for the transfer.
    unsafe fn run_range(&self, k0: u64, k1: u64) -> Result<()> {
        // SAFETY: the caller's contract for the job's memory range; windows are this thread's scratch.
        unsafe {
            // One thread per job: the job itself is the unit of parallelism.
            let io = HostIo {
                nthreads: 1,
                ..*self.host
            };
            let mut cur = Cursor::at(self.pat, k0);
            if self.in_place {
                while cur.k < k1 {
                    self.one_run(&io, &cur)?;
                    cur.advance(1);
                }
                return Ok(());
            }
            let run = self.pat.run;
            let (_, step) = *self.pat.levels.last().expect("in_place covers no loops");
            // Pieces of rows in the current window: (cursor at the piece's start, runs).
            let mut segments: Vec<(Cursor<'_>, u64)> = Vec::new();
            while cur.k < k1 {
                segments.clear();
                let start = cur.off;
                let mut end = start;
                while cur.k < k1 {
                    if !segments.is_empty()
                        && (cur.off - end > COALESCE_GAP
                            || cur.off + run as u64 - start > WINDOW as u64)
                    {
                        break;
                    }
                    let fit = if cur.off + run as u64 - start > WINDOW as u64 {
                        1
                    } else {
                        (WINDOW as u64 - (cur.off + run as u64 - start)) / step + 1
                    };
                    let m = fit.min(cur.left_in_row()).min(k1 - cur.k).max(1);
                    segments.push((cur.clone(), m));
                    end = cur.off + (m - 1) * step + run as u64;
                    cur.advance(m);
                }
                let span = (end - start) as usize;
                SCRATCH.with(|scratch| -> Result<()> {
                    let mut scratch = scratch.borrow_mut();
                    if scratch.len() < span {
                        scratch.resize(span, 0);
                    }
                    let buf = scratch.as_mut_ptr();
                    let covered: u64 = segments.iter().map(|(_, m)| m * run as u64).sum();
                    if self.dir == Direction::Read || covered < span as u64 {
                        io.transfer(
                            Direction::Read,
                            self.file_base + start,
                            BufPtr::new(buf),
                            span,
                        )?;
                    }
                    for (seg, m) in &segments {
                        let win = buf.add((seg.off - start) as usize);
                        let mem = (self.mem + seg.k as usize * run) as *mut u8;
                        match self.dir {
                            Direction::Read => {
                                strided_copy(true, mem, win, run, step as usize, *m as usize)
                            }
                            Direction::Write => {
                                strided_copy(false, win, mem, run, step as usize, *m as usize)
                            }
                        }
                    }
                    if self.dir == Direction::Write {
                        io.transfer(
                            Direction::Write,
                            self.file_base + start,
                            BufPtr::new(buf),
                            span,
                        )?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        }
    }

    /// The whole pattern: on the calling thread, or, when it spans at least `task_size`, in jobs of
    /// about [`JOB_SPAN`] bytes of file span on the pool (writes only where `HostIo` runs writes
    /// concurrently).
    ///
    /// # Safety
    /// The memory range of the pattern must be valid for the transfer.
    unsafe fn run(&self) -> Result<()> {
        let runs = self.pat.runs();
        if self.pat.levels.is_empty() {
            let (addr, len) = (self.file_base + self.pat.base, self.pat.run);
            // SAFETY: the caller's contract: the pattern's memory range is valid for the transfer.
            return unsafe {
                self.host
                    .transfer(self.dir, addr, BufPtr::new(self.mem as *mut u8), len)
            };
        }
        let span = self.pat.end() - self.pat.base;
        let parallel = span >= self.host.task_size as u64
            && (self.dir == Direction::Read || self.host.direct_fd.is_some());
        let jobs = if parallel {
            (span / JOB_SPAN).clamp(1, runs)
        } else {
            1
        };
        let per_job = runs.div_ceil(jobs);
        let jobs = runs.div_ceil(per_job);
        run_tasks(self.host.nthreads, jobs as usize, parallel, |j| {
            let k0 = j as u64 * per_job;
            // SAFETY: jobs cover disjoint runs of the caller's memory range.
            unsafe { self.run_range(k0, (k0 + per_job).min(runs)) }
        })
    }
}

/// Reads (or writes) pieces in host memory through windows (the selection callbacks' pieces and
/// the vector callbacks' host pieces): pieces close together in the file are
/// read as one range and gathered (or patched and written back); pieces far apart or long are
/// moved in place. Writes of overlapping pieces go in request order, so the last one wins as in
/// sec2.
///
/// # Safety
/// Every piece's buffer must be valid for the transfer; buffers of a read must not overlap.
pub(crate) unsafe fn transfer_pieces(
    host: &HostIo<'_>,
    pieces: Vec<Piece>,
    dir: Direction,
) -> Result<()> {
    let mut sorted = pieces.clone();
    sorted.sort_by_key(|p| p.addr);
    if dir == Direction::Write && any_overlap(&sorted) {
        // SAFETY: the caller's contract.
        return unsafe { host.write_vector(pieces) };
    }
    // Gaps over `CACHED_GAP` and up to `COALESCE_GAP` are skipped where the page cache holds the
    // file; the probe is made only where such a gap exists (it could change nothing else).
    let medium_gap = sorted.windows(2).any(|w| {
        let gap = w[1].addr.saturating_sub(w[0].addr + w[0].len as u64);
        gap > CACHED_GAP && gap <= COALESCE_GAP
    });
    let cached = match sorted.first() {
        // SAFETY: the first piece's buffer is valid for its length (the caller's contract).
        Some(first) if dir == Direction::Read && medium_gap => unsafe {
            page_cached(host, first.addr, first.buf, first.len)
        },
        _ => false,
    };
    let max_gap = if cached { CACHED_GAP } else { COALESCE_GAP };
    let runs = plan_reads(&sorted, max_gap, WINDOW);
    let total: usize = sorted.iter().map(|p| p.len).sum();
    let parallel = total >= host.task_size && (dir == Direction::Read || host.direct_fd.is_some());
    let io = HostIo {
        nthreads: 1,
        ..*host
    };
    // A run of one piece moves in place, in task_size parts; a run of several goes through a
    // window.
    enum Job {
        InPlace { addr: u64, buf: BufPtr, len: usize },
        Window(usize),
    }
    let mut jobs = Vec::with_capacity(runs.len());
    for (r, run) in runs.iter().enumerate() {
        match &sorted[run.pieces.clone()] {
            [one] => jobs.extend(split(one.len, host.task_size).map(|(off, n)| Job::InPlace {
                addr: one.addr + off as u64,
                buf: one.buf.add(off),
                len: n,
            })),
            _ => jobs.push(Job::Window(r)),
        }
    }
    run_tasks(host.nthreads, jobs.len(), parallel, |j| {
        let r = match jobs[j] {
            Job::Window(r) => r,
            // SAFETY: the piece's buffer is valid for its length (caller's contract).
            Job::InPlace { addr, buf, len } => unsafe {
                return io.transfer(dir, addr, buf, len);
            },
        };
        let run = &runs[r];
        let group = &sorted[run.pieces.clone()];
        SCRATCH.with(|scratch| -> Result<()> {
            let mut scratch = scratch.borrow_mut();
            if scratch.len() < run.len {
                scratch.resize(run.len, 0);
            }
            let buf = scratch.as_mut_ptr();
            // SAFETY: scratch holds run.len bytes; every piece lies inside the run and its buffer
            // holds p.len bytes.
            unsafe {
                io.transfer(Direction::Read, run.addr, BufPtr::new(buf), run.len)?;
                for p in group {
                    let win = buf.add((p.addr - run.addr) as usize);
                    match dir {
                        Direction::Read => {
                            std::ptr::copy_nonoverlapping(win, p.buf.as_ptr(), p.len)
                        }
                        Direction::Write => {
                            std::ptr::copy_nonoverlapping(p.buf.as_ptr().cast_const(), win, p.len)
                        }
                    }
                }
                if dir == Direction::Write {
                    io.transfer(Direction::Write, run.addr, BufPtr::new(buf), run.len)?;
                }
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(pat: &Strided) -> Vec<u64> {
        let mut cur = Cursor::at(pat, 0);
        let mut out = Vec::new();
        while cur.k < pat.runs() {
            out.push(cur.off);
            cur.advance(1);
        }
        out
    }

    /// A file of `len` bytes, byte i = i * 7 mod 251, and the `HostIo` over it.
    fn numbered_file(len: usize) -> (std::fs::File, Vec<u8>) {
        use std::io::Write;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&data).unwrap();
        (file, data)
    }

    fn host_io(file: &std::fs::File) -> HostIo<'_> {
        use std::os::fd::AsRawFd;
        HostIo {
            fd: file.as_raw_fd(),
            direct_fd: None,
            path: "numbered",
            nthreads: 2,
            task_size: 1 << 20,
            remote: None,
        }
    }

    #[test]
    fn runs_apart_in_the_page_cache_are_read_in_place_with_the_same_bytes() {
        // 256-byte runs 16 KiB apart (a 64x64 block of a 4096x4096 float32 matrix): between
        // `CACHED_GAP` and `COALESCE_GAP`, so a cached file takes them in place.
        let (file, data) = numbered_file(4 << 20);
        let pat = Strided {
            base: 1000,
            run: 256,
            levels: vec![(200, 16 << 10)],
        };
        let expected: Vec<u8> = offsets(&pat)
            .iter()
            .flat_map(|&o| data[o as usize..o as usize + 256].to_vec())
            .collect();
        let host = host_io(&file);
        let mut out = vec![0u8; expected.len()];
        let job = StridedJob {
            host: &host,
            file_base: 0,
            pat: &pat,
            mem: out.as_mut_ptr() as usize,
            dir: Direction::Read,
            in_place: false,
        };
        // SAFETY: `out` holds every run of the pattern (the probe reads the first into it).
        let in_place = unsafe { job.in_place() };
        assert!(in_place, "a file just written is in the page cache");
        // SAFETY: as above.
        unsafe { transfer_strided(&host, 0, &pat, out.as_mut_ptr() as usize, Direction::Read) }
            .unwrap();
        assert_eq!(out, expected);
        // Out of the page cache (where the file system drops it), through windows: the same bytes.
        use std::os::fd::AsRawFd;
        file.sync_all().unwrap();
        // SAFETY: advice on an open descriptor; it changes no bytes.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        out.fill(0);
        // SAFETY: as above.
        unsafe { transfer_strided(&host, 0, &pat, out.as_mut_ptr() as usize, Direction::Read) }
            .unwrap();
        assert_eq!(out, expected);
        // Scattered pieces with gaps on both sides of `CACHED_GAP`: the same bytes either way.
        let spots: Vec<(u64, usize)> = (0..300u64)
            .map(|i| {
                (
                    i * i * 37 % (4 << 20) as u64 / 4 * 4,
                    4 + (i as usize % 5) * 60,
                )
            })
            .filter(|&(a, n)| a as usize + n <= 4 << 20)
            .collect();
        let mut sorted = spots.clone();
        sorted.sort();
        sorted.dedup_by(|b, a| b.0 < a.0 + a.1 as u64);
        let mut bufs: Vec<Vec<u8>> = sorted.iter().map(|&(_, n)| vec![0u8; n]).collect();
        let pieces = sorted
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(addr, len), buf)| Piece {
                addr,
                len,
                buf: BufPtr::new(buf.as_mut_ptr()),
                mem_type: crate::abi::H5FD_MEM_DRAW,
            })
            .collect();
        // SAFETY: every piece's buffer is its own live vector of its length.
        unsafe { transfer_pieces(&host, pieces, Direction::Read) }.unwrap();
        for ((addr, len), buf) in sorted.iter().zip(&bufs) {
            assert_eq!(&buf[..], &data[*addr as usize..*addr as usize + len]);
        }
    }

    #[test]
    fn hyperslabs_simplify() {
        // x[::2] of 10 u32: 5 runs of 4 bytes, 8 apart.
        let p = Strided::from_hyperslab(4, &[10], &[0], &[2], &[5], &[1]).unwrap();
        assert_eq!((p.base, p.run, p.levels.clone()), (0, 4, vec![(5, 8)]));
        // Whole rows 2..5 of a 6x8 u8 matrix: one run.
        let p = Strided::from_hyperslab(1, &[6, 8], &[2, 0], &[1, 1], &[3, 1], &[1, 8]).unwrap();
        assert_eq!((p.base, p.run, p.levels.clone()), (16, 24, vec![]));
        // Column 3 of a 6x8 u16 matrix.
        let p = Strided::from_hyperslab(2, &[6, 8], &[0, 3], &[1, 1], &[6, 1], &[1, 1]).unwrap();
        assert_eq!((p.base, p.run, p.levels.clone()), (6, 2, vec![(6, 16)]));
        // "all" of a 3-D extent: one run.
        let p =
            Strided::from_hyperslab(8, &[2, 3, 4], &[0; 3], &[1; 3], &[1; 3], &[2, 3, 4]).unwrap();
        assert_eq!((p.run, p.levels.len()), (192, 0));
        // A scalar dataspace: one element.
        let p = Strided::from_hyperslab(4, &[], &[], &[], &[], &[]).unwrap();
        assert_eq!((p.base, p.run, p.levels.len()), (0, 4, 0));
        // The whole of an extent whose bytes overflow: refused, never a short run.
        let huge = [1u64 << 40, 1 << 30];
        let err = Strided::from_hyperslab(8, &huge, &[0; 2], &[1; 2], &[1; 2], &huge).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
    }

    #[test]
    fn cursor_walks_runs_in_file_order() {
        // Every 2nd row, columns 1..3 (block 2) of a 5x6 u8 matrix.
        let p = Strided::from_hyperslab(1, &[5, 6], &[0, 1], &[2, 1], &[3, 1], &[1, 2]).unwrap();
        assert_eq!(offsets(&p), vec![1, 13, 25]);
        assert_eq!(p.end(), 27);
        // 2 blocks of 2 columns, stride 3, in rows 1 and 3 (stride 2).
        let p = Strided::from_hyperslab(1, &[5, 10], &[1, 0], &[2, 3], &[2, 2], &[1, 2]).unwrap();
        assert_eq!(offsets(&p), vec![10, 13, 30, 33]);
        let mut cur = Cursor::at(&p, 2);
        assert_eq!(cur.off, 30);
        assert_eq!(cur.left_in_row(), 2);
        cur.advance(2);
        assert_eq!(cur.k, 4);
    }

    #[test]
    fn strided_copy_gathers_and_scatters() {
        let src: Vec<u8> = (0..64).collect();
        for run in [1usize, 2, 4, 8, 16, 3] {
            let step = run * 2;
            let count = 64 / step;
            let mut dst = vec![0u8; count * run];
            // SAFETY: both vectors are large enough for the loop.
            unsafe { strided_copy(true, dst.as_mut_ptr(), src.as_ptr(), run, step, count) };
            let expect: Vec<u8> = (0..count)
                .flat_map(|j| src[j * step..j * step + run].to_vec())
                .collect();
            assert_eq!(dst, expect, "gather run {run}");
            let mut back = vec![0xffu8; 64];
            // SAFETY: as above.
            unsafe { strided_copy(false, back.as_mut_ptr(), dst.as_ptr(), run, step, count) };
            for j in 0..count {
                assert_eq!(
                    &back[j * step..j * step + run],
                    &src[j * step..j * step + run]
                );
                assert!(back[j * step + run..(j + 1) * step]
                    .iter()
                    .all(|&b| b == 0xff));
            }
        }
    }
}
