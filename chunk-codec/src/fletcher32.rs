//! HDF5's Fletcher-32 filter (3): a 4-byte checksum appended to the data, little-endian. HDF5
//! also accepts the checksum with the bytes of each 16-bit half swapped (what releases before
//! 1.6.3 wrote), and so does this.

/// HDF5's Fletcher-32 of `data`: sums of big-endian 16-bit words (a last odd byte as the high
/// byte of a word), folded to 16 bits often enough that they never overflow.
pub fn fletcher32(data: &[u8]) -> u32 {
    let fold = |s: u32| (s & 0xffff) + (s >> 16);
    let (mut sum1, mut sum2) = (0u32, 0u32);
    // 360 words keep both sums within 32 bits between folds.
    for block in data.chunks(720) {
        let mut words = block.chunks_exact(2);
        for w in &mut words {
            sum1 += u32::from(w[0]) << 8 | u32::from(w[1]);
            sum2 += sum1;
        }
        if let [last] = words.remainder() {
            sum1 += u32::from(*last) << 8;
            sum2 += sum1;
        }
        sum1 = fold(sum1);
        sum2 = fold(sum2);
    }
    sum1 = fold(sum1);
    sum2 = fold(sum2);
    sum2 << 16 | sum1
}

/// Checks the Fletcher-32 that ends `data`.
pub(crate) fn check_fletcher32(data: &[u8]) -> Result<(), String> {
    let Some(split) = data.len().checked_sub(4) else {
        return Err(format!(
            "its {} bytes are too few to hold a Fletcher-32 checksum",
            data.len()
        ));
    };
    let (body, tail) = data.split_at(split);
    let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    let sum = fletcher32(body);
    let b = sum.to_le_bytes();
    let swapped = u32::from_le_bytes([b[1], b[0], b[3], b[2]]);
    if stored == sum || stored == swapped {
        Ok(())
    } else {
        Err(format!(
            "its Fletcher-32 checksum does not match (stored {stored:#010x}, computed {sum:#010x})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fletcher32_matches_hdf5_and_accepts_its_old_byte_order() {
        // By hand: words 0x0102, 0x0304 -> sum1 = 0x0406, sum2 = 0x0102 + 0x0406 = 0x0508.
        // (Files h5py writes with fletcher32=True are checked in the Python package's tests.)
        assert_eq!(fletcher32(&[1, 2, 3, 4]), 0x0508_0406);
        // An odd last byte counts as the high byte of a word: 0x0500.
        assert_eq!(
            fletcher32(&[1, 2, 3, 4, 5]),
            (0x0508 + 0x0906) << 16 | 0x0906
        );
        let body: Vec<u8> = (0..500u32).flat_map(|i| (i / 3).to_le_bytes()).collect();
        let sum = fletcher32(&body).to_le_bytes();
        let mut old = body.clone();
        old.extend([sum[1], sum[0], sum[3], sum[2]]);
        assert!(check_fletcher32(&old).is_ok());
        assert!(check_fletcher32(&[1, 2]).is_err());
    }
}
