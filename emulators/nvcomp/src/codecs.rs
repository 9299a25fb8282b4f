//! The three codecs, on the CPU with the reference implementations' crates, in the stream
//! formats nvCOMP's batched API reads: raw Deflate (RFC 1951, no zlib or gzip wrapper; flate2),
//! a Zstandard frame (zstd, the C library's bindings) and an LZ4 block (no frame; lz4_flex).

/// The codecs of the batched API that the emulator provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Deflate,
    Zstd,
    Lz4,
}

impl Codec {
    /// nvCOMP 6's decompression alignment (`nvcomp<Codec>RequiredDecompressionAlignment`, the
    /// most restrictive of input, output and temp).
    pub fn decompress_alignment(self) -> usize {
        match self {
            Codec::Deflate => 4,
            Codec::Zstd => 8,
            Codec::Lz4 => 4,
        }
    }

    /// nvCOMP 6's compression alignment (`nvcomp<Codec>RequiredCompressionAlignment`).
    pub fn compress_alignment(self) -> usize {
        match self {
            Codec::Deflate => 8,
            Codec::Zstd => 4,
            Codec::Lz4 => 4,
        }
    }

    /// Decodes `input` into `output`; the number of bytes written, or `None` for a stream that
    /// is not valid or does not fit.
    pub fn decode(self, input: &[u8], output: &mut [u8]) -> Option<usize> {
        match self {
            Codec::Deflate => {
                let mut inflater = flate2::Decompress::new(false);
                let status = inflater
                    .decompress(input, output, flate2::FlushDecompress::Finish)
                    .ok()?;
                (status == flate2::Status::StreamEnd).then(|| inflater.total_out() as usize)
            }
            Codec::Zstd => {
                // nvCOMP does not check a frame's content checksum (its decoders "can only
                // operate on valid input data", nvCOMP's release notes): neither does this, so
                // that the GPU path's own check on the host is what a test sees.
                let mut d = zstd::bulk::Decompressor::new().ok()?;
                d.set_parameter(zstd::zstd_safe::DParameter::ForceIgnoreChecksum(true))
                    .ok()?;
                d.decompress_to_buffer(input, output).ok()
            }
            Codec::Lz4 => lz4_flex::block::decompress_into(input, output).ok(),
        }
    }

    /// The largest encoding of `len` bytes (`...CompressGetMaxOutputChunkSize`).
    pub fn max_encoded(self, len: usize) -> usize {
        match self {
            // Stored blocks: 5 bytes per 65535, plus slack for the final block.
            Codec::Deflate => len + len / 65535 * 5 + 64,
            Codec::Zstd => zstd::zstd_safe::compress_bound(len),
            Codec::Lz4 => lz4_flex::block::get_maximum_output_size(len),
        }
    }

    /// Encodes `input` into `output`; the number of bytes written, or `None` if it does not fit.
    pub fn encode(self, input: &[u8], output: &mut [u8]) -> Option<usize> {
        match self {
            Codec::Deflate => {
                let mut deflater = flate2::Compress::new(flate2::Compression::new(6), false);
                let status = deflater
                    .compress(input, output, flate2::FlushCompress::Finish)
                    .ok()?;
                (status == flate2::Status::StreamEnd).then(|| deflater.total_out() as usize)
            }
            Codec::Zstd => zstd::bulk::compress_to_buffer(input, output, 3).ok(),
            Codec::Lz4 => lz4_flex::block::compress_into(input, output).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips_and_a_truncated_stream_never_decodes_whole() {
        let data: Vec<u8> = (0..100_000u32)
            .map(|k| ((k % 251) ^ (k / 7)) as u8)
            .collect();
        for codec in [Codec::Deflate, Codec::Zstd, Codec::Lz4] {
            let mut encoded = vec![0u8; codec.max_encoded(data.len())];
            let n = codec.encode(&data, &mut encoded).unwrap();
            assert!(n < data.len(), "{codec:?} compresses");
            let mut decoded = vec![0u8; data.len()];
            assert_eq!(codec.decode(&encoded[..n], &mut decoded), Some(data.len()));
            assert_eq!(decoded, data, "{codec:?}");
            // A truncated LZ4 block can be a valid shorter one: never the whole data, though.
            let truncated = codec.decode(&encoded[..n / 2], &mut decoded);
            assert!(truncated.is_none_or(|len| len < data.len()), "{codec:?}");
            let mut small = vec![0u8; data.len() - 1];
            assert_eq!(codec.decode(&encoded[..n], &mut small), None, "{codec:?}");
        }
        // A Zstandard frame whose content checksum is wrong behind intact data decodes, as on
        // nvCOMP, which does not check it.
        let mut checked = zstd::bulk::Compressor::new(3).unwrap();
        checked.include_checksum(true).unwrap();
        let mut frame = checked.compress(&data).unwrap();
        let last = frame.len() - 1;
        frame[last] ^= 1;
        assert!(zstd::bulk::decompress(&frame, data.len()).is_err());
        let mut decoded = vec![0u8; data.len()];
        assert_eq!(Codec::Zstd.decode(&frame, &mut decoded), Some(data.len()));
        assert_eq!(decoded, data);
    }
}
