//! Test data: byte patterns that differ at every position of a page and between seeds, so a
//! shifted, truncated or stale copy never compares equal by accident.

/// `len` reference bytes for `seed`: a multiplicative hash of the index, so no short period
/// (a copy displaced by 256 bytes or a page still differs).
pub fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(seed as u32 % 31) as u8
                ^ seed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn shifted_copies_and_other_seeds_differ() {
        let a = bytes(1 << 16, 1);
        assert_eq!(a, bytes(1 << 16, 1));
        assert_ne!(a, bytes(1 << 16, 2));
        for shift in [1, 256, 4096] {
            assert_ne!(a[shift..], a[..a.len() - shift], "shift {shift}");
        }
    }
}
