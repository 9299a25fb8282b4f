//! HDF5's compressed chunks written from the host: a chunk's bytes turned into the bytes its
//! dataset's filter pipeline stores ([`Encoding::encode`], the inverse of
//! [`Pipeline::decode`](crate::Pipeline::decode)), and a whole array cut into chunks that are
//! gathered and encoded in parallel on the process's thread pool while the calling thread writes
//! them raw in chunk order ([`write()`], in the child module `array`).
//!
//! The stored formats are those of [`crate::format`], written as the filters write them:
//!
//! * **shuffle** (2): the bytes regrouped by byte position within the element; a chunk of one
//!   element, or elements of one byte, is left as it is (HDF5's filter does the same).
//! * **Fletcher-32** (3): HDF5's checksum of the data appended, little-endian.
//! * **deflate** (1): a zlib stream at the filter's level (0-9, its first client value), by
//!   libdeflate (other bytes than zlib's at the same level, the same format).
//! * **Zstandard** (32015): one frame holding its decoded size (hdf5plugin's decoder sizes its
//!   output from it), at the level of the first client value, bounded to Zstandard's levels as
//!   hdf5plugin bounds it.
//! * **LZ4** (32004): hdf5plugin's framing, with the block size of the first client value (0:
//!   1 GiB), at most the chunk; each block an LZ4 block, or its bytes as they are when LZ4 does
//!   not make it smaller (the size field then equals the block's size, which is how the decoder
//!   tells).
//!
//! Every chunk is written with filter mask 0 (every filter applied).

mod array;

pub use array::{write, ChunkWriter, HostWrite};

use crate::fletcher32::fletcher32;
use crate::lz4_frame::encode_lz4;
use crate::pipeline::{Filter, Pipeline, Stage};
use crate::shuffle::shuffle;
use crate::step_buffers::{alternate, room};

/// The LZ4 filter's block size when its client value is 0 (or missing).
pub const LZ4_DEFAULT_BLOCK: usize = 1 << 30;

/// One step of encoding, with what it needs from the filter's client values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Shuffle { element: usize },
    Fletcher32,
    Deflate { level: u32 },
    Zstd { level: i32 },
    Lz4 { block: usize },
}

/// The steps that turn a chunk into its stored bytes, in pipeline (write) order. An empty list
/// stores chunks as they are (a chunked dataset without filters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoding {
    steps: Vec<Step>,
}

/// Compressors and buffers one encoding thread reuses from chunk to chunk.
#[derive(Default)]
pub struct EncodeScratch {
    /// Two buffers the steps alternate between; their lengths only grow (the data's length is
    /// kept apart), so no chunk pays for zeroing them again.
    bufs: [Vec<u8>; 2],
    deflate: Option<(u32, libdeflater::Compressor)>,
    zstd: Option<(i32, zstd::bulk::Compressor<'static>)>,
}

/// Where encoding left a chunk's stored bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// The input, unchanged (no step changed it).
    Input,
    /// The first `len` bytes of a scratch buffer.
    Buffer(usize, usize),
}

impl Encoding {
    /// The encoding of `filters` (the dataset's pipeline, in order, with the client values HDF5
    /// holds for it) for elements of `element_size` bytes, or why h5gds cannot write it. No
    /// filters: chunks stored as they are.
    pub fn for_filters(filters: &[Filter], element_size: usize) -> Result<Encoding, String> {
        if filters.is_empty() {
            return Ok(Encoding { steps: Vec::new() });
        }
        // The decoder's rules say which pipelines h5gds handles (and word the refusals).
        let pipeline = Pipeline::for_filters(filters, element_size)?;
        let mut steps = Vec::with_capacity(filters.len());
        for (stage, filter) in pipeline.stages().iter().zip(filters) {
            let first = filter.values.first().copied();
            steps.push(match *stage {
                Stage::Shuffle { element } => Step::Shuffle { element },
                Stage::Fletcher32 => Step::Fletcher32,
                Stage::Deflate => {
                    let level = first.unwrap_or(6);
                    if level > 9 {
                        return Err(format!(
                            "its deflate level {level} is not one HDF5's deflate filter takes \
                             (0 to 9)"
                        ));
                    }
                    Step::Deflate { level }
                }
                Stage::Zstd => {
                    // hdf5plugin reads its client value as a C int and bounds it.
                    let range = zstd::compression_level_range();
                    let level = first.map_or(zstd::DEFAULT_COMPRESSION_LEVEL, |v| v as i32);
                    Step::Zstd {
                        level: level.clamp(*range.start(), *range.end()),
                    }
                }
                Stage::Lz4 => Step::Lz4 {
                    block: match first {
                        Some(b) if b > 0 => b as usize,
                        _ => LZ4_DEFAULT_BLOCK,
                    },
                },
            });
        }
        Ok(Encoding { steps })
    }

    /// The steps, in pipeline order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Encodes one chunk (all its bytes, edge chunks padded) into its stored bytes, in
    /// `scratch`'s buffers or, when no step changes it, `chunk` itself. The error says why the
    /// chunk cannot be encoded.
    pub fn encode<'a>(
        &self,
        chunk: &'a [u8],
        scratch: &'a mut EncodeScratch,
    ) -> Result<&'a [u8], String> {
        Ok(match self.run(chunk, scratch)? {
            Place::Input => chunk,
            Place::Buffer(k, len) => &scratch.bufs[k][..len],
        })
    }

    /// Applies the steps in order; returns where the stored bytes are.
    fn run(&self, chunk: &[u8], scratch: &mut EncodeScratch) -> Result<Place, String> {
        let EncodeScratch {
            bufs,
            deflate,
            zstd,
        } = scratch;
        let mut at = Place::Input;
        for &step in &self.steps {
            let (buffer, len) = match at {
                Place::Input => (None, chunk.len()),
                Place::Buffer(k, len) => (Some(k), len),
            };
            let (input, spare, k) = alternate(bufs, buffer, chunk, len);
            let len = match step {
                Step::Shuffle { element } => {
                    let elements = input.len() / element.max(1);
                    if element <= 1 || elements <= 1 {
                        continue;
                    }
                    shuffle(input, element, room(spare, input.len()));
                    input.len()
                }
                Step::Fletcher32 => {
                    let n = input.len();
                    let out = room(spare, n + 4);
                    out[..n].copy_from_slice(input);
                    out[n..].copy_from_slice(&fletcher32(input).to_le_bytes());
                    n + 4
                }
                Step::Deflate { level } => {
                    if deflate.as_ref().is_none_or(|(l, _)| *l != level) {
                        let lvl = libdeflater::CompressionLvl::new(level as i32)
                            .map_err(|e| format!("deflate level {level}: {e:?}"))?;
                        *deflate = Some((level, libdeflater::Compressor::new(lvl)));
                    }
                    let (_, c) = deflate.as_mut().expect("created above");
                    let bound = c.zlib_compress_bound(input.len());
                    c.zlib_compress(input, room(spare, bound))
                        .map_err(|e| format!("deflate (zlib) encoding failed: {e}"))?
                }
                Step::Zstd { level } => {
                    if zstd.as_ref().is_none_or(|(l, _)| *l != level) {
                        let c = zstd::bulk::Compressor::new(level).map_err(|e| {
                            format!(
                                "a Zstandard encoder at level {level} could not be created: {e}"
                            )
                        })?;
                        *zstd = Some((level, c));
                    }
                    let (_, c) = zstd.as_mut().expect("created above");
                    let bound = zstd::zstd_safe::compress_bound(input.len());
                    c.compress_to_buffer(input, room(spare, bound))
                        .map_err(|e| format!("Zstandard encoding failed: {e}"))?
                }
                Step::Lz4 { block } => encode_lz4(input, block, spare)?,
            };
            at = Place::Buffer(k, len);
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Scratch;
    use h5gds_route::route::{
        FILTER_DEFLATE, FILTER_FLETCHER32, FILTER_LZ4, FILTER_SHUFFLE, FILTER_ZSTD,
    };

    pub(super) fn filter(id: i32, values: &[u32]) -> Filter {
        Filter {
            id,
            values: values.to_vec(),
        }
    }

    /// Compressible bytes with some noise: u32 values that repeat and drift.
    pub(super) fn sample(n: usize) -> Vec<u8> {
        let mut x = 12345u32;
        (0..n as u32)
            .flat_map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (i / 7 + (x >> 29)).to_le_bytes()
            })
            .collect()
    }

    /// Bytes LZ4 cannot shrink.
    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn pipelines() -> Vec<Vec<Filter>> {
        let s = filter(FILTER_SHUFFLE, &[4]);
        let f = filter(FILTER_FLETCHER32, &[]);
        let mut all = vec![vec![s.clone()], vec![f.clone()], vec![s.clone(), f.clone()]];
        for c in [
            filter(FILTER_DEFLATE, &[0]),
            filter(FILTER_DEFLATE, &[4]),
            filter(FILTER_DEFLATE, &[9]),
            filter(FILTER_ZSTD, &[1]),
            filter(FILTER_ZSTD, &[19]),
            filter(FILTER_ZSTD, &[]),
            filter(FILTER_LZ4, &[0]),
            filter(FILTER_LZ4, &[1000]),
        ] {
            all.push(vec![c.clone()]);
            all.push(vec![s.clone(), c.clone()]);
            all.push(vec![c.clone(), f.clone()]);
            all.push(vec![s.clone(), c.clone(), f.clone()]);
        }
        all
    }

    #[test]
    fn every_pipeline_round_trips_through_the_decoder() {
        let mut scratch = EncodeScratch::default();
        let mut decode = Scratch::default();
        for filters in pipelines() {
            let enc = Encoding::for_filters(&filters, 4).unwrap();
            let dec = Pipeline::for_filters(&filters, 4).unwrap();
            // Whole elements, a byte past them, one element, random bytes.
            let mut odd = sample(1001);
            odd.push(9);
            for data in [sample(5000), odd, sample(1), noise(4096)] {
                let stored = enc.encode(&data, &mut scratch).unwrap().to_vec();
                let back = dec.decode(&stored, 0, data.len(), &mut decode).unwrap();
                assert_eq!(back, data, "{filters:?}, {} bytes", data.len());
            }
        }
    }

    #[test]
    fn compression_shrinks_and_levels_are_the_filters_values() {
        let data: Vec<u8> = (0..1u32 << 16)
            .flat_map(|i| (i / 7).to_le_bytes())
            .collect();
        let mut scratch = EncodeScratch::default();
        let size = |filters: &[Filter], scratch: &mut EncodeScratch| {
            let enc = Encoding::for_filters(filters, 4).unwrap();
            enc.encode(&data, scratch).unwrap().len()
        };
        let fast = size(&[filter(FILTER_DEFLATE, &[1])], &mut scratch);
        let best = size(&[filter(FILTER_DEFLATE, &[9])], &mut scratch);
        let stored = size(&[filter(FILTER_DEFLATE, &[0])], &mut scratch);
        assert!(best <= fast && fast < data.len() / 2, "{best} {fast}");
        assert!(stored > data.len(), "level 0 stores: {stored}");
        assert_eq!(
            Encoding::for_filters(&[filter(FILTER_ZSTD, &[99])], 4)
                .unwrap()
                .steps(),
            [Step::Zstd {
                level: *zstd::compression_level_range().end()
            }]
        );
        let e = Encoding::for_filters(&[filter(FILTER_DEFLATE, &[10])], 4).unwrap_err();
        assert!(e.contains("deflate level 10"), "{e}");
        let e = Encoding::for_filters(&[filter(4, &[])], 4).unwrap_err();
        assert!(e.contains("szip"), "{e}");
        let two = [filter(FILTER_ZSTD, &[1]), filter(FILTER_LZ4, &[])];
        let e = Encoding::for_filters(&two, 4).unwrap_err();
        assert!(e.contains("more than one compression"), "{e}");
        // hdf5plugin's decoder sizes its output from the frame.
        let z = Encoding::for_filters(&[filter(FILTER_ZSTD, &[3])], 4).unwrap();
        let frame = z.encode(&data, &mut scratch).unwrap();
        let size = zstd::zstd_safe::get_frame_content_size(frame)
            .ok()
            .flatten();
        assert_eq!(size, Some(data.len() as u64));
    }

    #[test]
    fn lz4_framing_is_hdf5plugins_with_blocks_stored_raw_when_lz4_does_not_help() {
        let mut data = sample(500); // 2000 compressible bytes
        data.extend(noise(1500));
        let enc = Encoding::for_filters(&[filter(FILTER_LZ4, &[1000])], 4).unwrap();
        let mut scratch = EncodeScratch::default();
        let stored = enc.encode(&data, &mut scratch).unwrap().to_vec();
        assert_eq!(&stored[..8], &3500u64.to_be_bytes());
        assert_eq!(&stored[8..12], &1000u32.to_be_bytes());
        let pieces = crate::format::lz4_pieces(stored.len(), 3500, |at, len| {
            Ok(stored[at..at + len].to_vec())
        })
        .unwrap();
        let coded: Vec<_> = pieces.iter().map(|p| (p.out_len, p.coded)).collect();
        assert_eq!(
            coded,
            [(1000, true), (1000, true), (1000, false), (500, false)]
        );
        assert_eq!(
            &stored[pieces[2].at..pieces[2].at + 1000],
            &data[2000..3000]
        );
        // The default block (1 GiB) is cut to the chunk, as the filter writes it.
        let one = Encoding::for_filters(&[filter(FILTER_LZ4, &[0])], 4).unwrap();
        let stored = one.encode(&data, &mut scratch).unwrap();
        assert_eq!(&stored[8..12], &3500u32.to_be_bytes());
    }

    #[test]
    fn shuffle_of_single_elements_and_no_filters_leave_the_chunk_as_it_is() {
        let data = sample(10);
        let mut scratch = EncodeScratch::default();
        let none = Encoding::for_filters(&[], 4).unwrap();
        assert!(std::ptr::eq(
            none.encode(&data, &mut scratch).unwrap(),
            &data[..]
        ));
        let bytes = Encoding::for_filters(&[filter(FILTER_SHUFFLE, &[1])], 1).unwrap();
        assert_eq!(bytes.encode(&data, &mut scratch).unwrap(), data);
        let shuffled = Encoding::for_filters(&[filter(FILTER_SHUFFLE, &[4])], 4).unwrap();
        let s = shuffled.encode(&data[..8], &mut scratch).unwrap();
        assert_eq!(
            s,
            [data[0], data[4], data[1], data[5], data[2], data[6], data[3], data[7]]
        );
    }
}
