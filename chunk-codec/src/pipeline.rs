//! A dataset's filter pipeline, decoded on the host: which pipelines h5gds decodes itself
//! ([`Pipeline::for_filters`], with the reason when it does not), and one stored chunk decoded
//! back to its elements ([`Pipeline::decode`]).
//!
//! HDF5 applies a dataset's filters in pipeline order when it writes a chunk and undoes them in
//! reverse order when it reads one; bit `i` of a chunk's filter mask says filter `i` was skipped
//! for that chunk (an optional filter that did not help). The stages:
//!
//! * **shuffle** (2): the bytes of the chunk's elements regrouped by byte position (all first
//!   bytes, then all second bytes, ...); bytes past the last whole element stay at the end.
//! * **Fletcher-32** (3): a 4-byte checksum appended to the data, little-endian. HDF5 also
//!   accepts the checksum with the bytes of each 16-bit half swapped (what releases before 1.6.3
//!   wrote), and so does this.
//! * **deflate** (1), **Zstandard** (32015), **LZ4** (32004): the formats in [`crate::format`];
//!   at most one of them per pipeline, so the size each decodes to is known.

mod prefix;

// Public here since before the filters' bytes had modules of their own.
pub use crate::fletcher32::fletcher32;

use crate::fletcher32::check_fletcher32;
use crate::lz4_frame::decode_lz4;
use crate::shuffle::unshuffle;
use crate::step_buffers::{alternate, room};
use h5gds_route::route::{
    filter_name, FILTER_DEFLATE, FILTER_FLETCHER32, FILTER_LZ4, FILTER_SHUFFLE, FILTER_ZSTD,
};

/// One filter of a dataset's pipeline, as `H5Pget_filter2` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub id: i32,
    /// Its client data values (for shuffle, the first is the element size).
    pub values: Vec<u32>,
}

/// One step of decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Shuffle { element: usize },
    Fletcher32,
    Deflate,
    Zstd,
    Lz4,
}

impl Stage {
    fn is_compression(self) -> bool {
        matches!(self, Stage::Deflate | Stage::Zstd | Stage::Lz4)
    }
}

/// Chunks decoded in this process (a chunk whose every filter was skipped too), so tests can
/// show that a read decodes each chunk it touches once.
static CHUNKS_DECODED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many stored chunks of filtered datasets this process has decoded on the host.
pub fn chunks_decoded() -> u64 {
    CHUNKS_DECODED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one chunk decoded (whole or its first bytes).
fn count_decoded() {
    CHUNKS_DECODED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Whether stage `i` was applied to a chunk stored with filter mask `mask` (the mask has bits
/// for the first 32 filters only).
fn applied(mask: u32, i: usize) -> bool {
    i >= 32 || mask & (1 << i) == 0
}

/// The stages of a pipeline h5gds decodes, in pipeline (write) order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    stages: Vec<Stage>,
}

/// Decoders and buffers one decoding thread reuses from chunk to chunk.
#[derive(Default)]
pub struct Scratch {
    bufs: [Vec<u8>; 2],
    deflate: Option<libdeflater::Decompressor>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    /// For the first bytes of a chunk only ([`Pipeline::decode_prefix_into`]).
    zstd_stream: Option<zstd::stream::raw::Decoder<'static>>,
}

impl Scratch {
    /// The bytes its buffers hold.
    pub fn held_bytes(&self) -> usize {
        self.bufs.iter().map(Vec::capacity).sum()
    }
}

impl Pipeline {
    /// The pipeline of `filters` (in pipeline order) for elements of `element_size` bytes, or
    /// why h5gds leaves it to HDF5.
    pub fn for_filters(filters: &[Filter], element_size: usize) -> Result<Pipeline, String> {
        if filters.is_empty() {
            return Err("its chunks are not filtered".into());
        }
        let mut stages = Vec::with_capacity(filters.len());
        for f in filters {
            stages.push(match f.id {
                FILTER_SHUFFLE => Stage::Shuffle {
                    element: f
                        .values
                        .first()
                        .map_or(element_size, |&v| v as usize)
                        .max(1),
                },
                FILTER_FLETCHER32 => Stage::Fletcher32,
                FILTER_DEFLATE => Stage::Deflate,
                FILTER_ZSTD => Stage::Zstd,
                FILTER_LZ4 => Stage::Lz4,
                other => {
                    return Err(format!(
                        "its filter {} is not one h5gds decodes (deflate, shuffle, \
                         fletcher32, Zstandard 32015 and LZ4 32004 are)",
                        filter_name(other)
                    ))
                }
            });
        }
        if stages.iter().filter(|s| s.is_compression()).count() > 1 {
            return Err(format!(
                "its chunks pass more than one compression filter ({})",
                filters
                    .iter()
                    .map(|f| filter_name(f.id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(Pipeline { stages })
    }

    /// The pipeline of chunks stored unfiltered: decoding is taking the stored bytes as they are.
    pub fn unfiltered() -> Pipeline {
        Pipeline { stages: Vec::new() }
    }

    /// Whether a chunk stored with filter mask `mask` holds its decoded bytes as they are (no
    /// stage applies: an unfiltered pipeline, or every filter skipped), so they can be read
    /// straight into place.
    pub fn stores_plain(&self, mask: u32) -> bool {
        (0..self.stages.len()).all(|i| !applied(mask, i))
    }

    /// The stages, in pipeline order.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// Decodes one stored chunk (filter mask `mask`) back to its `chunk_bytes` bytes, in
    /// `scratch`'s buffers or, when every filter was skipped, `stored` itself. The error says
    /// why the chunk cannot be decoded.
    pub fn decode<'a>(
        &self,
        stored: &'a [u8],
        mask: u32,
        chunk_bytes: usize,
        scratch: &'a mut Scratch,
    ) -> Result<&'a [u8], String> {
        let at = self.run(stored, mask, chunk_bytes, scratch, None)?;
        Ok(match at {
            Place::Stored => &stored[..chunk_bytes],
            Place::Buffer(k) => &scratch.bufs[k][..chunk_bytes],
            Place::Dest => unreachable!("no destination was given"),
        })
    }

    /// [`Pipeline::decode`] into `dest` (`chunk_bytes` long): the last stage writes there, so a
    /// chunk that fills a run of the output is decoded in place, with no copy.
    pub fn decode_into(
        &self,
        stored: &[u8],
        mask: u32,
        scratch: &mut Scratch,
        dest: &mut [u8],
    ) -> Result<(), String> {
        let chunk_bytes = dest.len();
        match self.run(stored, mask, chunk_bytes, scratch, Some(dest))? {
            Place::Dest => {}
            Place::Stored => dest.copy_from_slice(&stored[..chunk_bytes]),
            Place::Buffer(k) => dest.copy_from_slice(&scratch.bufs[k][..chunk_bytes]),
        }
        Ok(())
    }

    /// Undoes the stages the mask did not skip, last first; returns where the decoded bytes are.
    fn run(
        &self,
        stored: &[u8],
        mask: u32,
        chunk_bytes: usize,
        scratch: &mut Scratch,
        mut dest: Option<&mut [u8]>,
    ) -> Result<Place, String> {
        if !self.stages.is_empty() {
            count_decoded();
        }
        let applied = |i: usize| applied(mask, i);
        // The size of the data before each stage, in pipeline order (known up to the one
        // compression stage, which is all decoding needs).
        let mut before = Vec::with_capacity(self.stages.len());
        let mut size = Some(chunk_bytes);
        for (i, stage) in self.stages.iter().enumerate() {
            before.push(size);
            if applied(i) {
                size = match stage {
                    Stage::Shuffle { .. } => size,
                    Stage::Fletcher32 => size.map(|s| s + 4),
                    _ => None,
                };
            }
        }
        // The stage that produces the decoded chunk may write into `dest`, unless a checksum
        // undone after it needs the 4 bytes beyond the chunk.
        let last = (0..self.stages.len())
            .find(|&i| applied(i) && self.stages[i] != Stage::Fletcher32)
            .filter(|&f| (0..f).all(|i| !applied(i)));
        let Scratch {
            bufs,
            deflate,
            zstd,
            ..
        } = scratch;
        let mut at = Place::Stored;
        let mut len = stored.len();
        for (i, stage) in self.stages.iter().enumerate().rev() {
            if !applied(i) {
                continue;
            }
            let buffer = match at {
                Place::Stored => None,
                Place::Buffer(k) => Some(k),
                Place::Dest => unreachable!("the stage writing into dest is the last"),
            };
            let (input, spare, k) = alternate(bufs, buffer, stored, len);
            if *stage == Stage::Fletcher32 {
                check_fletcher32(input)?;
                len -= 4;
                continue;
            }
            let expected = before[i].unwrap_or(input.len());
            let (out, next): (&mut [u8], Place) = match (last == Some(i), dest.as_deref_mut()) {
                (true, Some(d)) if d.len() == expected => (d, Place::Dest),
                _ => (room(spare, expected), Place::Buffer(k)),
            };
            match *stage {
                // Shuffling keeps the size: bytes of another size than the chunk's (a damaged
                // chunk, or a chunk of another dataset) are refused, not unshuffled in part.
                Stage::Shuffle { .. } if input.len() != expected => {
                    return Err(format!(
                        "its shuffled bytes are {} long, but a chunk holds {expected}",
                        input.len()
                    ))
                }
                Stage::Shuffle { element } => unshuffle(input, element, out),
                Stage::Deflate => {
                    let d = deflate.get_or_insert_with(libdeflater::Decompressor::new);
                    let n = d
                        .zlib_decompress(input, out)
                        .map_err(|e| format!("its deflate (zlib) data does not decode: {e}"))?;
                    decoded_size("deflate", n, expected)?;
                }
                Stage::Zstd => {
                    if zstd.is_none() {
                        *zstd = Some(zstd::bulk::Decompressor::new().map_err(|e| {
                            format!("a Zstandard decoder could not be created: {e}")
                        })?);
                    }
                    let d = zstd.as_mut().expect("created above");
                    let n = d
                        .decompress_to_buffer(input, out)
                        .map_err(|e| format!("its Zstandard frame does not decode: {e}"))?;
                    decoded_size("Zstandard", n, expected)?;
                }
                Stage::Lz4 => decode_lz4(input, out)?,
                Stage::Fletcher32 => unreachable!("handled above"),
            }
            at = next;
            len = expected;
        }
        if len != chunk_bytes {
            return Err(format!(
                "it decodes to {len} bytes, but a chunk holds {chunk_bytes}"
            ));
        }
        Ok(at)
    }
}

/// Where decoding left a chunk's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Stored,
    Buffer(usize),
    Dest,
}

fn decoded_size(codec: &str, n: usize, expected: usize) -> Result<(), String> {
    if n == expected {
        Ok(())
    } else {
        Err(format!(
            "its {codec} data decodes to {n} bytes, but a chunk holds {expected}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    pub(super) fn filters(ids: &[i32]) -> Vec<Filter> {
        ids.iter()
            .map(|&id| Filter {
                id,
                values: if id == FILTER_SHUFFLE {
                    vec![4]
                } else {
                    vec![]
                },
            })
            .collect()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(4));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn shuffle(data: &[u8], element: usize) -> Vec<u8> {
        let n = data.len() / element;
        let mut out = vec![0; data.len()];
        for e in 0..n {
            for b in 0..element {
                out[b * n + e] = data[e * element + b];
            }
        }
        out[n * element..].copy_from_slice(&data[n * element..]);
        out
    }

    fn with_fletcher(data: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        out.extend(fletcher32(data).to_le_bytes());
        out
    }

    pub(super) fn sample(n: usize) -> Vec<u8> {
        (0..n as u32).flat_map(|i| (i / 3).to_le_bytes()).collect()
    }

    /// Asserts that `stored` (filter mask `mask`) decodes to `data`.
    fn assert_decodes(p: &Pipeline, stored: &[u8], mask: u32, data: &[u8], scratch: &mut Scratch) {
        assert_eq!(p.decode(stored, mask, data.len(), scratch).unwrap(), data);
    }

    #[test]
    fn pipelines_h5gds_decodes_and_those_it_leaves_to_hdf5() {
        assert!(Pipeline::for_filters(&filters(&[2, 1, 3]), 4).is_ok());
        assert_eq!(
            Pipeline::for_filters(&filters(&[2]), 4).unwrap().stages(),
            [Stage::Shuffle { element: 4 }]
        );
        let none = Pipeline::for_filters(&[], 4).unwrap_err();
        assert!(none.contains("not filtered"), "{none}");
        let szip = Pipeline::for_filters(&filters(&[4]), 4).unwrap_err();
        assert!(szip.contains("szip (4)"), "{szip}");
        let two = Pipeline::for_filters(&filters(&[1, 32015]), 4).unwrap_err();
        assert!(two.contains("more than one compression"), "{two}");
    }

    #[test]
    fn shuffle_deflate_fletcher_chunks_decode_to_their_bytes() {
        let data = sample(1001); // 4004 bytes: whole elements of 4
        let mut data = data;
        data.push(7); // and a byte past the last whole element
        let stored = with_fletcher(&zlib(&shuffle(&data, 4)));
        let p = Pipeline::for_filters(&filters(&[2, 1, 3]), 4).unwrap();
        let mut scratch = Scratch::default();
        assert_decodes(&p, &stored, 0, &data, &mut scratch);
        // Decoded again with the same scratch.
        assert_decodes(&p, &stored, 0, &data, &mut scratch);
    }

    #[test]
    fn skipped_filters_in_the_mask_are_not_undone() {
        let data = sample(64);
        // Deflate (filter 1) skipped: the chunk is shuffled bytes with a checksum.
        let stored = with_fletcher(&shuffle(&data, 4));
        let p = Pipeline::for_filters(&filters(&[2, 1, 3]), 4).unwrap();
        let mut scratch = Scratch::default();
        assert_decodes(&p, &stored, 0b010, &data, &mut scratch);
        // Everything skipped: the stored bytes are the chunk.
        assert_decodes(&p, &data, 0b111, &data, &mut scratch);
    }

    /// `data` in hdf5plugin's LZ4 framing, in blocks of `block` bytes, those `stored_as_is` picks
    /// (by index) stored uncoded, the others LZ4-coded.
    pub(super) fn lz4_framed(
        data: &[u8],
        block: usize,
        stored_as_is: impl Fn(usize) -> bool,
    ) -> Vec<u8> {
        let mut framed = (data.len() as u64).to_be_bytes().to_vec();
        framed.extend((block as u32).to_be_bytes());
        for (k, part) in data.chunks(block).enumerate() {
            let stored = if stored_as_is(k) {
                part.to_vec()
            } else {
                lz4::block::compress(part, None, false).unwrap()
            };
            framed.extend((stored.len() as u32).to_be_bytes());
            framed.extend(stored);
        }
        framed
    }

    #[test]
    fn zstandard_and_lz4_chunks_decode() {
        let data = sample(5000);
        let mut scratch = Scratch::default();
        let z = zstd::bulk::compress(&data, 3).unwrap();
        let p = Pipeline::for_filters(&filters(&[32015]), 4).unwrap();
        assert_decodes(&p, &z, 0, &data, &mut scratch);
        // Blocks of 8000 bytes: one coded, two stored as they are.
        let framed = lz4_framed(&data, 8000, |k| k > 0);
        let p = Pipeline::for_filters(&filters(&[32004]), 4).unwrap();
        assert_decodes(&p, &framed, 0, &data, &mut scratch);
    }
    #[test]
    fn corrupt_chunks_say_what_is_wrong() {
        let data = sample(256);
        let mut scratch = Scratch::default();
        let p = Pipeline::for_filters(&filters(&[1, 3]), 4).unwrap();
        let mut stored = with_fletcher(&zlib(&data));
        stored[5] ^= 0xff;
        let e = p.decode(&stored, 0, data.len(), &mut scratch).unwrap_err();
        assert!(e.contains("Fletcher-32 checksum does not match"), "{e}");
        let p = Pipeline::for_filters(&filters(&[1]), 4).unwrap();
        let mut stored = zlib(&data);
        let last = stored.len() - 1;
        stored[last] ^= 1; // the Adler-32
        let e = p.decode(&stored, 0, data.len(), &mut scratch).unwrap_err();
        assert!(e.contains("deflate (zlib) data does not decode"), "{e}");
        let e = p
            .decode(&zlib(&data), 0, data.len() + 4, &mut scratch)
            .unwrap_err();
        assert!(
            e.contains("decodes to 1024 bytes, but a chunk holds 1028"),
            "{e}"
        );
        let p = Pipeline::for_filters(&filters(&[32015]), 4).unwrap();
        let e = p.decode(&data, 0, data.len(), &mut scratch).unwrap_err();
        assert!(e.contains("Zstandard frame does not decode"), "{e}");
        // Shuffled bytes of another size than the chunk (cut short, or one byte too many) are
        // refused, not unshuffled in part (this panicked, found by tests/hostile_chunks.rs).
        let p = Pipeline::for_filters(&filters(&[2]), 4).unwrap();
        let shuffled = shuffle(&data, 4);
        for stored in [&shuffled[..1000], &[&shuffled[..], &[0]].concat()[..]] {
            let e = p.decode(stored, 0, data.len(), &mut scratch).unwrap_err();
            assert!(
                e.contains(&format!(
                    "shuffled bytes are {} long, but a chunk holds 1024",
                    stored.len()
                )),
                "{e}"
            );
        }
    }
}
