//! HDF5's shuffle filter (2), both ways: the bytes of a chunk's elements regrouped by byte
//! position (all first bytes, then all second bytes, ...); bytes past the last whole element stay
//! at the end.

/// The shuffle filter: byte `b` of element `e` goes to `b * elements + e`; bytes past the last
/// whole element stay at the end.
pub(crate) fn shuffle(input: &[u8], element: usize, out: &mut [u8]) {
    let elements = input.len() / element;
    for b in 0..element {
        let plane = &mut out[b * elements..(b + 1) * elements];
        for (e, byte) in plane.iter_mut().enumerate() {
            *byte = input[e * element + b];
        }
    }
    let whole = elements * element;
    out[whole..].copy_from_slice(&input[whole..]);
}

/// Undoes the shuffle filter: byte `b` of element `e` was stored at `b * elements + e`.
pub(crate) fn unshuffle(input: &[u8], element: usize, out: &mut [u8]) {
    let elements = input.len() / element;
    if element <= 1 || elements <= 1 {
        out.copy_from_slice(input);
        return;
    }
    for b in 0..element {
        let plane = &input[b * elements..(b + 1) * elements];
        for (e, &byte) in plane.iter().enumerate() {
            out[e * element + b] = byte;
        }
    }
    let whole = elements * element;
    out[whole..].copy_from_slice(&input[whole..]);
}
