//! The two scratch buffers a chunk's filter steps alternate between, encoding and decoding
//! alike: each step reads the data where the step before left it (the chunk itself, for the
//! first) and writes into the other buffer, so a chain of steps needs no third one.

/// The data the next step reads (`len` bytes: of `input` when `at` is `None`, else of buffer
/// `at`), the buffer free to take its output, and that buffer's index.
pub(crate) fn alternate<'a>(
    bufs: &'a mut [Vec<u8>; 2],
    at: Option<usize>,
    input: &'a [u8],
    len: usize,
) -> (&'a [u8], &'a mut Vec<u8>, usize) {
    let [first, second] = bufs;
    let (data, spare, k): (&[u8], _, _) = match at {
        None => (input, first, 0),
        Some(0) => (first, second, 1),
        Some(_) => (second, first, 0),
    };
    (&data[..len], spare, k)
}

/// `buf`'s first `n` bytes, grown (zero-filled) if it is shorter: to exactly `n`, not by the
/// doubling `Vec` growth would give, so a buffer is never larger than a step's data.
pub(crate) fn room(buf: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if buf.len() < n {
        buf.reserve_exact(n - buf.len());
        buf.resize(n, 0);
    }
    &mut buf[..n]
}
