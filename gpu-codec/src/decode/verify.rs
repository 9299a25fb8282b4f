//! The checksums stored chunks carry that nvCOMP does not check, checked on the host: deflate's
//! Adler-32 (the zlib trailer, big-endian) and a Zstandard frame's content checksum (the low 32
//! bits of the XXH64 of its decoded bytes, seed 0, little-endian after its last block, where the
//! frame header's Content_Checksum_flag says so; hdf5plugin writes none, other writers may).
//! hdf5plugin's LZ4 framing carries no checksum.
//!
//! Each decoded chunk to check is copied into a pinned host buffer of its slot on the slot's
//! stream, right after its decoding; the slot's batch is checked when it is finished, on the
//! host's threads, while the other slot's batch decodes on the GPU.

use h5gds_chunk_codec::format;
use h5gds_route::route::GpuCodec;

/// A checksum a stored chunk carries, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sum {
    /// Deflate's Adler-32 of the decoded bytes.
    Adler32(u32),
    /// A Zstandard frame's content checksum: the low 32 bits of XXH64 (seed 0).
    Xxh64Low(u32),
}

/// The checksum a stored chunk of `codec` carries, from its first bytes `head` (up to 16) and
/// its last 4 `tail`: deflate's Adler-32 always; a Zstandard frame's content checksum where its
/// header has the flag; none for LZ4.
pub(super) fn stored_sum(codec: GpuCodec, head: &[u8], tail: [u8; 4]) -> Option<Sum> {
    match codec {
        GpuCodec::Deflate => Some(Sum::Adler32(format::adler_trailer(&tail))),
        GpuCodec::Zstd => {
            format::zstd_content_checksum(head).then(|| Sum::Xxh64Low(u32::from_le_bytes(tail)))
        }
        GpuCodec::Lz4 => None,
    }
}

/// Checks a chunk's decoded `bytes` against its stored `sum`; the reason when they differ.
pub(super) fn check(sum: Sum, bytes: &[u8]) -> Result<(), String> {
    match sum {
        Sum::Adler32(stored) => {
            let mut adler = simd_adler32::Adler32::new();
            adler.write(bytes);
            let actual = adler.finish();
            if actual == stored {
                return Ok(());
            }
            Err(format!(
                "its decoded bytes have Adler-32 {actual:#010x}, but the stream stores \
                 {stored:#010x}; the file is corrupt"
            ))
        }
        Sum::Xxh64Low(stored) => {
            let actual = xxhash_rust::xxh64::xxh64(bytes, 0) as u32;
            if actual == stored {
                return Ok(());
            }
            Err(format!(
                "its decoded bytes have the Zstandard content checksum {actual:#010x} (XXH64), \
                 but the frame stores {stored:#010x}; the file is corrupt"
            ))
        }
    }
}

/// Checks every chunk of `sums` ((chunk index in the batch, its sum), the k-th chunk's decoded
/// bytes at `k * chunk_bytes` in `host`) on up to `threads` of the host's threads; the first
/// failing chunk in batch order, and why.
pub(super) fn check_all(
    sums: &[(usize, Sum)],
    host: &[u8],
    chunk_bytes: usize,
    threads: usize,
) -> Result<(), (usize, String)> {
    let mut chunks: Vec<(usize, Sum, &[u8])> = (sums.iter().enumerate())
        .map(|(k, &(i, sum))| (i, sum, &host[k * chunk_bytes..(k + 1) * chunk_bytes]))
        .collect();
    super::first_failure(&mut chunks, threads, |(i, sum, bytes)| {
        check(*sum, bytes).map_err(|why| (*i, why))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_codec_carries_its_checksum_and_a_wrong_one_is_refused() {
        let data: Vec<u8> = (0..100_000u32).map(|k| (k % 251) as u8).collect();
        // Deflate: the zlib trailer, big-endian.
        let adler = adler2::adler32_slice(&data).to_be_bytes();
        let sum = stored_sum(GpuCodec::Deflate, &[0x78, 0x9c], adler).unwrap();
        assert_eq!(check(sum, &data), Ok(()));
        let wrong = stored_sum(GpuCodec::Deflate, &[0x78, 0x9c], [0, 0, 0, 1]).unwrap();
        let e = check(wrong, &data).unwrap_err();
        assert!(e.contains("Adler-32") && e.contains("0x00000001"), "{e}");
        // Zstandard: only a frame whose header has the flag; its last 4 bytes, little-endian.
        let mut plain = zstd::bulk::Compressor::new(3).unwrap();
        let frame = plain.compress(&data).unwrap();
        let tail: [u8; 4] = frame[frame.len() - 4..].try_into().unwrap();
        assert_eq!(stored_sum(GpuCodec::Zstd, &frame[..16], tail), None);
        let mut checked = zstd::bulk::Compressor::new(3).unwrap();
        checked.include_checksum(true).unwrap();
        let frame = checked.compress(&data).unwrap();
        let tail: [u8; 4] = frame[frame.len() - 4..].try_into().unwrap();
        let sum = stored_sum(GpuCodec::Zstd, &frame[..16], tail).unwrap();
        assert_eq!(check(sum, &data), Ok(()));
        let mut changed = data.clone();
        changed[77_777] ^= 1;
        let e = check(sum, &changed).unwrap_err();
        assert!(e.contains("Zstandard content checksum"), "{e}");
        // LZ4 (hdf5plugin's framing) carries none.
        assert_eq!(stored_sum(GpuCodec::Lz4, &[0; 16], [0; 4]), None);
    }

    #[test]
    fn the_first_failing_chunk_in_batch_order_is_named_on_any_thread_count() {
        let chunk = 4096;
        let chunks: Vec<Vec<u8>> = (0..40u8).map(|k| vec![k; chunk]).collect();
        let host: Vec<u8> = chunks.concat();
        let mut sums: Vec<(usize, Sum)> = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| (i * 2, Sum::Adler32(adler2::adler32_slice(c))))
            .collect();
        for threads in [1, 3] {
            assert_eq!(check_all(&sums, &host, chunk, threads), Ok(()));
        }
        sums[31].1 = Sum::Adler32(7);
        sums[9].1 = Sum::Xxh64Low(7);
        for threads in [1, 3] {
            let (i, why) = check_all(&sums, &host, chunk, threads).unwrap_err();
            assert_eq!(i, 18, "{why}");
            assert!(why.contains("Zstandard content checksum"), "{why}");
        }
    }
}
