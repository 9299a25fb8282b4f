//! The first bytes of a chunk decoded without the rest: a read that needs only a chunk's first
//! rows stops decoding there, where the one stage applied is Zstandard or LZ4.

use super::{applied, count_decoded, Pipeline, Scratch, Stage};
use crate::format;
use crate::lz4_frame::decode_lz4_prefix;

impl Pipeline {
    /// Whether the first bytes of a chunk stored with filter mask `mask` decode without the rest:
    /// the one stage applied is Zstandard or LZ4, which decode front to back (shuffle spreads
    /// each element's bytes over the whole chunk, Fletcher-32 checks all of it, and libdeflate
    /// decodes whole streams only).
    pub fn decodes_prefix(&self, mask: u32) -> bool {
        let mut undone = self
            .stages
            .iter()
            .enumerate()
            .filter(|&(i, _)| applied(mask, i));
        matches!(
            (undone.next(), undone.next()),
            (Some((_, Stage::Zstd | Stage::Lz4)), None)
        )
    }

    /// [`Pipeline::decode_prefix_into`] in `scratch`'s buffer: the chunk's `chunk_bytes`, of
    /// which the first `wanted` are decoded (the rest is left as the buffer held it).
    pub fn decode_prefix<'a>(
        &self,
        stored: &[u8],
        mask: u32,
        chunk_bytes: usize,
        wanted: usize,
        scratch: &'a mut Scratch,
    ) -> Result<&'a [u8], String> {
        let mut buf = std::mem::take(&mut scratch.bufs[0]);
        if buf.len() != chunk_bytes {
            buf.resize(chunk_bytes, 0);
        }
        let done = self.decode_prefix_into(stored, mask, chunk_bytes, scratch, &mut buf[..wanted]);
        scratch.bufs[0] = buf;
        done.map(|()| &scratch.bufs[0][..])
    }

    /// Whether decoding only the first `wanted` of a chunk's `chunk_bytes` (stored with filter
    /// mask `mask`) is faster than decoding all of it: LZ4's partial decoder runs at its full
    /// speed; Zstandard's streaming decoder (the one that stops early) goes through its window
    /// buffer at about half the one-shot decoder's speed (32 MiB chunks: 57-62 ms against
    /// 29 ms), so it pays below half the chunk.
    pub fn prefix_pays(&self, mask: u32, wanted: usize, chunk_bytes: usize) -> bool {
        if wanted >= chunk_bytes || !self.decodes_prefix(mask) {
            return false;
        }
        let lz4 = self
            .stages
            .iter()
            .enumerate()
            .any(|(i, s)| applied(mask, i) && *s == Stage::Lz4);
        lz4 || wanted <= chunk_bytes / 2
    }

    /// Decodes the first `dest.len()` bytes of a chunk of `chunk_bytes` into `dest`, where
    /// [`Pipeline::decodes_prefix`] says so (else an error): a read that needs only the chunk's
    /// first rows stops decoding there. Never past a checksum the chunk carries: a Zstandard
    /// chunk whose frame has a content checksum, or that holds more than one frame, is decoded
    /// whole (and its checksums checked); LZ4's framing has none. The error says why the chunk
    /// cannot be decoded.
    pub fn decode_prefix_into(
        &self,
        stored: &[u8],
        mask: u32,
        chunk_bytes: usize,
        scratch: &mut Scratch,
        dest: &mut [u8],
    ) -> Result<(), String> {
        if !self.decodes_prefix(mask) || dest.len() > chunk_bytes {
            return Err(format!(
                "the first {} of its {chunk_bytes} bytes cannot be decoded alone",
                dest.len()
            ));
        }
        let stage = self
            .stages
            .iter()
            .enumerate()
            .find(|&(i, _)| applied(mask, i))
            .map(|(_, s)| *s);
        if stage == Some(Stage::Lz4) {
            // hdf5plugin's LZ4 framing carries no checksum: nothing past `dest` is checked.
            count_decoded();
            return decode_lz4_prefix(stored, chunk_bytes, dest);
        }
        if !zstd_prefix_alone(stored) {
            // A content checksum covers the whole frame (or more than one frame, which the
            // streaming decoder below stops at): decoded whole, which checks every checksum.
            let whole = self.decode(stored, mask, chunk_bytes, scratch)?;
            dest.copy_from_slice(&whole[..dest.len()]);
            return Ok(());
        }
        count_decoded();
        use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
        if scratch.zstd_stream.is_none() {
            scratch.zstd_stream = Some(
                Decoder::new()
                    .map_err(|e| format!("a Zstandard decoder could not be created: {e}"))?,
            );
        }
        let d = scratch.zstd_stream.as_mut().expect("created above");
        d.reinit()
            .map_err(|e| format!("a Zstandard decoder could not be reset: {e}"))?;
        let wanted = dest.len();
        let mut input = InBuffer::around(stored);
        let mut output = OutBuffer::around(dest);
        while output.pos() < wanted {
            let before = (input.pos(), output.pos());
            let hint = d
                .run(&mut input, &mut output)
                .map_err(|e| format!("its Zstandard frame does not decode: {e}"))?;
            if output.pos() < wanted && (hint == 0 || (input.pos(), output.pos()) == before) {
                return Err(format!(
                    "its Zstandard frame ends after {} bytes, but a chunk holds {chunk_bytes}",
                    output.pos()
                ));
            }
        }
        Ok(())
    }
}

/// Whether the first bytes of a stored Zstandard chunk may be decoded without the rest: the
/// chunk is exactly one frame (its blocks' headers walked by zstd, no decoding) whose header has
/// no content checksum, so stopping early skips no check the format carries. A chunk this cannot
/// walk is decoded whole, which reports what is wrong with it.
fn zstd_prefix_alone(stored: &[u8]) -> bool {
    !format::zstd_content_checksum(stored)
        && zstd::zstd_safe::find_frame_compressed_size(stored).is_ok_and(|n| n == stored.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::{filters, lz4_framed, sample};

    #[test]
    fn the_first_bytes_of_zstandard_and_lz4_chunks_decode_alone() {
        let data = sample(50_000);
        let mut scratch = Scratch::default();
        let z = zstd::bulk::compress(&data, 3).unwrap();
        let zp = Pipeline::for_filters(&filters(&[32015]), 4).unwrap();
        // One block, and blocks of 64000 bytes (the fourth stored as it is).
        let lz4_framed = |block: usize| lz4_framed(&data, block, |k| k == 3);
        let lp = Pipeline::for_filters(&filters(&[32004]), 4).unwrap();
        for (p, stored) in [
            (&zp, z),
            (&lp, lz4_framed(data.len())),
            (&lp, lz4_framed(64_000)),
        ] {
            assert!(p.decodes_prefix(0));
            for wanted in [1, 4, 63_999, 64_000, 64_001, 150_000, data.len()] {
                let mut dest = vec![0u8; wanted];
                p.decode_prefix_into(&stored, 0, data.len(), &mut scratch, &mut dest)
                    .unwrap();
                assert_eq!(dest, data[..wanted], "{:?}, {wanted} bytes", p.stages());
            }
            // A stored chunk cut short names the problem.
            let cut = &stored[..stored.len() / 2];
            let mut dest = vec![0u8; data.len()];
            let e = p
                .decode_prefix_into(cut, 0, data.len(), &mut scratch, &mut dest)
                .unwrap_err();
            assert!(e.starts_with("its "), "{e}");
        }
        // Shuffled, checksummed or deflated chunks, and a skipped codec, decode whole only.
        for ids in [&[2, 32015][..], &[32015, 3], &[1]] {
            assert!(!Pipeline::for_filters(&filters(ids), 4)
                .unwrap()
                .decodes_prefix(0));
        }
        assert!(!zp.decodes_prefix(1));
        // Zstandard's prefixes pay below half the chunk, LZ4's always.
        assert!(zp.prefix_pays(0, 100, 200) && !zp.prefix_pays(0, 101, 200));
        assert!(lp.prefix_pays(0, 199, 200) && !lp.prefix_pays(0, 200, 200));
    }

    #[test]
    fn a_first_bytes_decode_never_skips_a_zstandard_content_checksum() {
        let data = sample(50_000);
        let mut scratch = Scratch::default();
        let zp = Pipeline::for_filters(&filters(&[32015]), 4).unwrap();
        let mut checked = zstd::bulk::Compressor::new(3).unwrap();
        checked.include_checksum(true).unwrap();
        let frame = checked.compress(&data).unwrap();
        // Intact: the first bytes, and all of them, decode.
        for wanted in [4, 100_000, data.len()] {
            let mut dest = vec![0u8; wanted];
            zp.decode_prefix_into(&frame, 0, data.len(), &mut scratch, &mut dest)
                .unwrap();
            assert_eq!(dest, data[..wanted]);
        }
        // The stored checksum wrong behind intact data: refused however few bytes are asked for,
        // as the whole decode refuses it.
        let mut wrong = frame.clone();
        let last = wrong.len() - 1;
        wrong[last] ^= 0x10;
        for wanted in [4, 100_000] {
            let mut dest = vec![0u8; wanted];
            let e = zp
                .decode_prefix_into(&wrong, 0, data.len(), &mut scratch, &mut dest)
                .unwrap_err();
            assert!(e.contains("Zstandard frame does not decode"), "{e}");
            let e = zp
                .decode_prefix(&wrong, 0, data.len(), wanted, &mut scratch)
                .unwrap_err();
            assert!(e.contains("Zstandard frame does not decode"), "{e}");
        }
        let e = zp.decode(&wrong, 0, data.len(), &mut scratch).unwrap_err();
        assert!(e.contains("checksum"), "{e}");
        // Two frames, the second with a wrong checksum: decoded whole, so refused too; intact,
        // their first bytes are the data's.
        let (a, b) = data.split_at(120_000);
        let mut two = zstd::bulk::compress(a, 3).unwrap();
        two.extend(checked.compress(b).unwrap());
        let mut dest = vec![0u8; 1000];
        zp.decode_prefix_into(&two, 0, data.len(), &mut scratch, &mut dest)
            .unwrap();
        assert_eq!(dest, data[..1000]);
        let last = two.len() - 1;
        two[last] ^= 0x10;
        assert!(zp
            .decode_prefix_into(&two, 0, data.len(), &mut scratch, &mut dest)
            .is_err());
        // A single frame with no checksum still stops early.
        assert!(zstd_prefix_alone(&zstd::bulk::compress(&data, 3).unwrap()));
        assert!(!zstd_prefix_alone(&frame));
    }
}
