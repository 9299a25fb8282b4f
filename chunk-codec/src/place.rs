//! Which chunks a hyperslab selection touches, and the copy of a chunk's selected elements into
//! the output array (the selection in row-major order): index arithmetic, no I/O.

/// A hyperslab of a dataset: per axis the first index, the step (1 or more) and the count.
#[derive(Clone, Copy, Debug)]
pub struct Hyperslab<'a> {
    pub start: &'a [u64],
    pub step: &'a [u64],
    pub count: &'a [u64],
}

/// The selected elements inside one chunk: per axis, the position in the selection of the first
/// one (`first`) and how many (`count`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkPart {
    /// The chunk's first element (its offset, as HDF5 names chunks).
    pub offset: Vec<u64>,
    pub first: Vec<u64>,
    pub count: Vec<u64>,
}

impl ChunkPart {
    /// The part as a hyperslab of the dataset: start, step, count per axis.
    pub fn file_start(&self, sel: &Hyperslab) -> Vec<u64> {
        (0..self.first.len())
            .map(|a| sel.start[a] + self.first[a] * sel.step[a])
            .collect()
    }

    /// Its number of elements.
    pub fn len(&self) -> u64 {
        self.count.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The selected positions along one axis inside chunk `c` (of `size` elements): the first
/// position and the count, if any.
fn axis_part(start: u64, step: u64, count: u64, c: u64, size: u64) -> Option<(u64, u64)> {
    let (lo, hi) = (c * size, c * size + size - 1);
    if count == 0 || hi < start {
        return None;
    }
    let first = lo.saturating_sub(start).div_ceil(step);
    let last = ((hi - start) / step).min(count - 1);
    (first <= last).then(|| (first, last - first + 1))
}

/// The chunks of shape `chunk` holding selected elements, in row-major chunk order, each with
/// the part of the selection it holds.
pub fn chunks_selected(sel: &Hyperslab, chunk: &[u64]) -> Vec<ChunkPart> {
    let rank = chunk.len();
    if sel.count.contains(&0) {
        return Vec::new();
    }
    // Per axis, the chunks holding selected positions and their parts.
    let per_axis: Vec<Vec<(u64, u64, u64)>> = (0..rank)
        .map(|a| {
            let (start, step, count, size) = (sel.start[a], sel.step[a], sel.count[a], chunk[a]);
            let last = start + (count - 1) * step;
            let mut parts = Vec::new();
            let mut c = start / size;
            while c <= last / size {
                if let Some((first, n)) = axis_part(start, step, count, c, size) {
                    parts.push((c * size, first, n));
                    // Skip the chunks the step jumps over.
                    let next = start + (first + n) * step;
                    c = (next / size).max(c + 1);
                } else {
                    c += 1;
                }
            }
            parts
        })
        .collect();
    let mut out = Vec::new();
    let mut index = vec![0usize; rank];
    'all: loop {
        let pick: Vec<&(u64, u64, u64)> = (0..rank).map(|a| &per_axis[a][index[a]]).collect();
        out.push(ChunkPart {
            offset: pick.iter().map(|p| p.0).collect(),
            first: pick.iter().map(|p| p.1).collect(),
            count: pick.iter().map(|p| p.2).collect(),
        });
        for a in (0..rank).rev() {
            index[a] += 1;
            if index[a] < per_axis[a].len() {
                continue 'all;
            }
            index[a] = 0;
        }
        break;
    }
    out
}

/// Where a whole chunk lies in the output when its elements fill one run of it, in elements from
/// the output's start: every element of the chunk selected (steps of 1), and the part spanning
/// the output's trailing axes. `None` when its elements are scattered, or it is clipped.
pub fn whole_chunk_run(part: &ChunkPart, sel: &Hyperslab, chunk: &[u64]) -> Option<u64> {
    let rank = chunk.len();
    let whole = (0..rank).all(|a| part.count[a] == chunk[a] && (chunk[a] == 1 || sel.step[a] == 1));
    let split = part.count.iter().position(|&n| n > 1).unwrap_or(rank);
    let spans = (split + 1..rank).all(|a| part.count[a] == sel.count[a]);
    if !(whole && spans) {
        return None;
    }
    let mut offset = 0u64;
    let mut stride = 1u64;
    for a in (0..rank).rev() {
        offset += part.first[a] * stride;
        stride *= sel.count[a];
    }
    Some(offset)
}

/// An output array's address, shared by threads that each write their own elements of it (the
/// holder keeps the array alive until every thread has finished).
#[derive(Clone, Copy, Debug)]
pub struct SharedOut(*mut u8);

// SAFETY: a plain address; whoever writes through it writes elements no other thread writes
// (the contract of `SharedOut::new`).
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// Shares the output at `out`.
    ///
    /// # Safety
    /// Every thread given it must write only elements no other thread writes, and `out` must
    /// stay valid until all have finished.
    pub unsafe fn new(out: *mut u8) -> SharedOut {
        SharedOut(out)
    }

    /// The address `offset` bytes into the output (a method, so that closures capture the
    /// whole `SharedOut`, which is `Sync`, rather than its raw pointer).
    pub fn at(self, offset: u64) -> *mut u8 {
        self.0.wrapping_add(offset as usize)
    }
}

/// Where the elements of a copy come from: an array of `shape`, read from `start` with `step`
/// per axis.
pub struct Source<'a> {
    pub bytes: &'a [u8],
    pub shape: &'a [u64],
    pub start: &'a [u64],
    pub step: &'a [u64],
}

/// The elements between neighbours along each axis of a row-major array of `shape`.
pub(crate) fn strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1];
    }
    s
}

/// Copies a box of `count` elements of `element` bytes from `src` into the row-major array of
/// `shape` at `out`, at position `at` (steps of 1).
///
/// # Safety
/// `out` must be valid for writes of the whole array of `shape`, the box must lie inside it,
/// and no other thread may touch the elements the box covers while this runs; `src`'s box must
/// lie inside its array (checked: a short source panics rather than reads out of bounds).
pub unsafe fn copy_box(
    src: &Source,
    out: *mut u8,
    shape: &[u64],
    at: &[u64],
    count: &[u64],
    element: usize,
) {
    let rank = count.len();
    if rank == 0 || count.contains(&0) {
        return;
    }
    let (src_strides, out_strides) = (strides(src.shape), strides(shape));
    let inner = rank - 1;
    let run = count[inner] as usize;
    let contiguous = src.step[inner] == 1;
    let mut index = vec![0u64; rank];
    loop {
        let mut s = 0u64;
        let mut o = 0u64;
        for a in 0..rank {
            s += (src.start[a] + index[a] * src.step[a]) * src_strides[a];
            o += (at[a] + index[a]) * out_strides[a];
        }
        let (s, o) = (s as usize * element, o as usize * element);
        if contiguous {
            let from = &src.bytes[s..s + run * element];
            // SAFETY: the run lies inside the output array (the caller's box), which no one else
            // writes while this runs.
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), out.add(o), from.len()) };
        } else {
            let step = src.step[inner] as usize * element;
            for k in 0..run {
                let from = &src.bytes[s + k * step..s + k * step + element];
                // SAFETY: as above, element by element.
                unsafe {
                    std::ptr::copy_nonoverlapping(from.as_ptr(), out.add(o + k * element), element)
                };
            }
        }
        let mut a = inner;
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            index[a] += 1;
            if index[a] < count[a] {
                break;
            }
            index[a] = 0;
        }
    }
}

/// [`copy_box`] into an array borrowed whole, which is checked to hold `shape` and the box.
pub fn copy_box_into(
    src: &Source,
    out: &mut [u8],
    shape: &[u64],
    at: &[u64],
    count: &[u64],
    element: usize,
) {
    let elements: u64 = shape.iter().product();
    assert!(
        out.len() as u64 >= elements * element as u64,
        "the output holds its array"
    );
    assert!(
        at.len() == shape.len()
            && count.len() == shape.len()
            && (0..shape.len()).all(|a| at[a] + count[a] <= shape[a]),
        "the box lies inside the array"
    );
    // SAFETY: `out` is borrowed exclusively and holds the array of `shape`, inside which the box
    // lies (both checked above).
    unsafe { copy_box(src, out.as_mut_ptr(), shape, at, count, element) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel<'a>(start: &'a [u64], step: &'a [u64], count: &'a [u64]) -> Hyperslab<'a> {
        Hyperslab { start, step, count }
    }

    #[test]
    fn chunks_are_found_with_their_parts_and_steps_skip_chunks() {
        // Axis of 100 in chunks of 10: elements 5, 25, 45, 65 (step 20) skip every other chunk.
        let parts = chunks_selected(&sel(&[5], &[20], &[4]), &[10]);
        let got: Vec<_> = parts
            .iter()
            .map(|p| (p.offset[0], p.first[0], p.count[0]))
            .collect();
        assert_eq!(got, [(0, 0, 1), (20, 1, 1), (40, 2, 1), (60, 3, 1)]);
        // 2-D: rows 3..13, columns 0..4 of chunks 10x4.
        let parts = chunks_selected(&sel(&[3, 0], &[1, 1], &[10, 4]), &[10, 4]);
        let got: Vec<_> = parts
            .iter()
            .map(|p| (p.offset.clone(), p.first.clone(), p.count.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (vec![0, 0], vec![0, 0], vec![7, 4]),
                (vec![10, 0], vec![7, 0], vec![3, 4])
            ]
        );
        assert!(chunks_selected(&sel(&[0], &[1], &[0]), &[10]).is_empty());
        // Step 3 from 1: positions 1,4,7 | 10,13,16,19 | 22 in chunks of 10.
        let parts = chunks_selected(&sel(&[1], &[3], &[8]), &[10]);
        let got: Vec<_> = parts
            .iter()
            .map(|p| (p.offset[0], p.first[0], p.count[0]))
            .collect();
        assert_eq!(got, [(0, 0, 3), (10, 3, 4), (20, 7, 1)]);
        assert_eq!(parts[1].file_start(&sel(&[1], &[3], &[8])), [10]);
    }

    #[test]
    fn whole_chunks_filling_a_run_of_the_output_are_found() {
        // Rows 0..20 of a 20x10 dataset in chunks of 5x10: each chunk is 50 elements in a row.
        let s = sel(&[0, 0], &[1, 1], &[20, 10]);
        let parts = chunks_selected(&s, &[5, 10]);
        let runs: Vec<_> = parts
            .iter()
            .map(|p| whole_chunk_run(p, &s, &[5, 10]))
            .collect();
        assert_eq!(runs, [Some(0), Some(50), Some(100), Some(150)]);
        // Chunks of 5x5 are not runs (each row of the output spans two chunks)...
        let parts = chunks_selected(&s, &[5, 5]);
        assert!(parts
            .iter()
            .all(|p| whole_chunk_run(p, &s, &[5, 5]).is_none()));
        // ...unless a chunk is one row of them.
        let parts = chunks_selected(&s, &[1, 10]);
        assert_eq!(whole_chunk_run(&parts[3], &s, &[1, 10]), Some(30));
        // A clipped or stepped chunk is not whole.
        let clipped = sel(&[1, 0], &[1, 1], &[19, 10]);
        let parts = chunks_selected(&clipped, &[5, 10]);
        assert_eq!(whole_chunk_run(&parts[0], &clipped, &[5, 10]), None);
        assert_eq!(whole_chunk_run(&parts[1], &clipped, &[5, 10]), Some(40));
        let stepped = sel(&[0, 0], &[2, 1], &[10, 10]);
        let parts = chunks_selected(&stepped, &[5, 10]);
        assert!(parts
            .iter()
            .all(|p| whole_chunk_run(p, &stepped, &[5, 10]).is_none()));
    }

    /// `src`'s box of `count` elements of `element` bytes copied into a fresh output of `shape`
    /// at `at`.
    fn copied(src: &Source, shape: &[u64], at: &[u64], count: &[u64], element: usize) -> Vec<u8> {
        let mut out = vec![0u8; shape.iter().product::<u64>() as usize * element];
        copy_box_into(src, &mut out, shape, at, count, element);
        out
    }

    #[test]
    fn boxes_copy_with_and_without_steps() {
        // A 4x6 source of bytes 0..24; take rows 1..3, columns 0,2,4 into a 3x5 output at (1,1).
        let src: Vec<u8> = (0..24).collect();
        let s = Source {
            bytes: &src,
            shape: &[4, 6],
            start: &[1, 0],
            step: &[1, 2],
        };
        assert_eq!(
            copied(&s, &[3, 5], &[1, 1], &[2, 3], 1),
            [0, 0, 0, 0, 0, 0, 6, 8, 10, 0, 0, 12, 14, 16, 0]
        );
        // Elements of 2 bytes, contiguous rows.
        let src: Vec<u8> = (0..16).collect();
        let s = Source {
            bytes: &src,
            shape: &[2, 4],
            start: &[0, 2],
            step: &[1, 1],
        };
        assert_eq!(
            copied(&s, &[2, 2], &[0, 0], &[2, 2], 2),
            [4, 5, 6, 7, 12, 13, 14, 15]
        );
    }
}
