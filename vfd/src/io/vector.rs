//! Vector requests: HDF5's compact encoding of sizes and types, and the coalescing plan that turns
//! many small pieces separated by small gaps into a few large reads.
//!
//! Without the sieve buffer, a strided selection (a column, every k-th row) reaches the driver as
//! a vector of many small pieces. Pieces whose gaps are at most `max_gap` are read as one run
//! into a scratch buffer and scattered; runs never span more than `max_span` bytes, so scratch
//! memory stays bounded and sparse patterns stay sparse.

use super::BufPtr;
use crate::abi::{haddr_t, H5FD_mem_t, H5FD_MEM_NOLIST};
use crate::error::{Error, Result};

/// One piece of a vector request: `len` bytes at file address `addr`, memory at `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub addr: u64,
    pub len: usize,
    pub buf: BufPtr,
    pub mem_type: H5FD_mem_t,
}

/// The pieces of a vector request, from HDF5's parallel arrays.
///
/// # Safety
/// Each non-null array must hold `count` entries.
pub(crate) unsafe fn request_pieces(
    count: u32,
    types: *const H5FD_mem_t,
    addrs: *const haddr_t,
    sizes: *const usize,
    bufs: *const BufPtr,
) -> Result<Vec<Piece>> {
    let n = count as usize;
    if n == 0 {
        return Ok(Vec::new());
    }
    if types.is_null() || addrs.is_null() || sizes.is_null() || bufs.is_null() {
        return Err(Error::InvalidArgument(
            "vector request with a null array".into(),
        ));
    }
    // SAFETY: the caller guarantees each array holds `count` entries.
    let (types, addrs, sizes, bufs) = unsafe {
        (
            std::slice::from_raw_parts(types, n),
            std::slice::from_raw_parts(addrs, n),
            std::slice::from_raw_parts(sizes, n),
            std::slice::from_raw_parts(bufs, n),
        )
    };
    let pieces = expand(types, addrs, sizes, bufs)?;
    if let Some(p) = pieces
        .iter()
        .find(|p| p.buf.as_ptr().is_null() && p.len > 0)
    {
        return Err(Error::InvalidArgument(format!(
            "vector request with a null buffer at address {}",
            p.addr
        )));
    }
    Ok(pieces)
}

/// Expands HDF5's vector arrays: a size of 0 (or a type of `H5FD_MEM_NOLIST`) means "the previous
/// entry's value for this and every later entry".
pub fn expand(
    types: &[H5FD_mem_t],
    addrs: &[haddr_t],
    sizes: &[usize],
    bufs: &[BufPtr],
) -> Result<Vec<Piece>> {
    let mut pieces = Vec::with_capacity(addrs.len());
    let (mut size, mut mem_type) = (None, None);
    let (mut size_fixed, mut type_fixed) = (false, false);
    for i in 0..addrs.len() {
        if !size_fixed {
            match sizes[i] {
                0 if i == 0 => {
                    return Err(Error::InvalidArgument(
                        "vector request: sizes[0] is zero".into(),
                    ));
                }
                0 => size_fixed = true,
                s => size = Some(s),
            }
        }
        if !type_fixed {
            match types[i] {
                H5FD_MEM_NOLIST if i > 0 => type_fixed = true,
                t => mem_type = Some(t),
            }
        }
        pieces.push(Piece {
            addr: addrs[i],
            len: size.unwrap_or(0),
            buf: bufs[i],
            mem_type: mem_type.unwrap_or(0),
        });
    }
    Ok(pieces)
}

/// A contiguous file range read once, covering `pieces` (indices into the caller's sorted list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub addr: u64,
    pub len: usize,
    pub pieces: std::ops::Range<usize>,
}

/// Groups pieces, which must be sorted by address, into runs.
pub fn plan_reads(sorted: &[Piece], max_gap: u64, max_span: usize) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (i, piece) in sorted.iter().enumerate() {
        let end = piece.addr + piece.len as u64;
        if let Some(run) = runs.last_mut() {
            let run_end = run.addr + run.len as u64;
            let gap = piece.addr.saturating_sub(run_end);
            let new_len = (end.max(run_end) - run.addr) as usize;
            if gap <= max_gap && new_len <= max_span {
                run.len = new_len;
                run.pieces.end = i + 1;
                continue;
            }
        }
        runs.push(Run {
            addr: piece.addr,
            len: piece.len,
            pieces: i..i + 1,
        });
    }
    runs
}

/// Whether any two pieces (sorted by address) overlap in the file.
pub fn any_overlap(sorted: &[Piece]) -> bool {
    sorted
        .windows(2)
        .any(|w| w[0].addr + w[0].len as u64 > w[1].addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(addr: u64, len: usize) -> Piece {
        Piece {
            addr,
            len,
            buf: BufPtr::new(std::ptr::null_mut()),
            mem_type: 3,
        }
    }

    #[test]
    fn zero_size_and_nolist_repeat_the_previous_entry() {
        let pieces = expand(
            &[3, -1, 7],
            &[0, 10, 20],
            &[4, 0, 99],
            &[piece(0, 0).buf; 3],
        )
        .unwrap();
        assert_eq!(
            pieces.iter().map(|p| p.len).collect::<Vec<_>>(),
            vec![4, 4, 4]
        );
        assert_eq!(
            pieces.iter().map(|p| p.mem_type).collect::<Vec<_>>(),
            vec![3, 3, 3]
        );
        assert!(expand(&[3], &[0], &[0], &[piece(0, 0).buf]).is_err());
    }

    #[test]
    fn dense_strides_coalesce_and_sparse_ones_do_not() {
        // A column of 4-byte elements with rows 64 bytes apart: one run.
        let dense: Vec<Piece> = (0..100).map(|i| piece(i * 64, 4)).collect();
        let runs = plan_reads(&dense, 4096, 1 << 20);
        assert_eq!(
            runs,
            vec![Run {
                addr: 0,
                len: 99 * 64 + 4,
                pieces: 0..100
            }]
        );
        // Rows 1 MiB apart: one run each.
        let sparse: Vec<Piece> = (0..10).map(|i| piece(i << 20, 4)).collect();
        assert_eq!(plan_reads(&sparse, 4096, 1 << 20).len(), 10);
        // The span limit splits a dense run.
        let runs = plan_reads(&dense, 4096, 1024);
        assert!(runs.iter().all(|r| r.len <= 1024));
        assert_eq!(runs.iter().map(|r| r.pieces.len()).sum::<usize>(), 100);
    }

    #[test]
    fn overlap_detection() {
        assert!(!any_overlap(&[piece(0, 4), piece(4, 4)]));
        assert!(any_overlap(&[piece(0, 5), piece(4, 4)]));
    }
}
