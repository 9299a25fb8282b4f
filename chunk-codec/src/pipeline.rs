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

use crate::format;
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
            CHUNKS_DECODED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let applied = |i: usize| i >= 32 || mask & (1 << i) == 0;
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
        } = scratch;
        let (first, second) = bufs.split_at_mut(1);
        let mut at = Place::Stored;
        let mut len = stored.len();
        for (i, stage) in self.stages.iter().enumerate().rev() {
            if !applied(i) {
                continue;
            }
            // The data now, and the buffer free to take the stage's output.
            let (input, spare, k): (&[u8], &mut Vec<u8>, usize) = match at {
                Place::Stored => (stored, &mut first[0], 0),
                Place::Buffer(0) => (&first[0], &mut second[0], 1),
                Place::Buffer(_) => (&second[0], &mut first[0], 0),
                Place::Dest => unreachable!("the stage writing into dest is the last"),
            };
            let input = &input[..len];
            if *stage == Stage::Fletcher32 {
                check_fletcher32(input)?;
                len -= 4;
                continue;
            }
            let expected = before[i].unwrap_or(input.len());
            let (out, next): (&mut [u8], Place) = match (last == Some(i), dest.as_deref_mut()) {
                (true, Some(d)) if d.len() == expected => (d, Place::Dest),
                _ => {
                    if spare.len() != expected {
                        spare.resize(expected, 0);
                    }
                    (&mut spare[..], Place::Buffer(k))
                }
            };
            match *stage {
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

/// hdf5plugin's LZ4 framing: each block decoded (or copied, when stored as it is) into place.
fn decode_lz4(input: &[u8], out: &mut [u8]) -> Result<(), String> {
    let pieces = format::lz4_pieces(input.len(), out.len(), |at, len| {
        input
            .get(at..at + len)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format!("its LZ4 framing runs past its end at byte {at}"))
    })?;
    for p in pieces {
        let (src, dst) = (
            &input[p.at..p.at + p.len],
            &mut out[p.out_at..p.out_at + p.out_len],
        );
        if p.coded {
            let n = lz4::block::decompress_to_buffer(src, Some(p.out_len as i32), dst)
                .map_err(|e| format!("its LZ4 block at byte {} does not decode: {e}", p.at))?;
            if n != p.out_len {
                return Err(format!(
                    "its LZ4 block at byte {} decodes to {n} bytes, not {}",
                    p.at, p.out_len
                ));
            }
        } else {
            dst.copy_from_slice(src);
        }
    }
    Ok(())
}

/// Undoes the shuffle filter: byte `b` of element `e` was stored at `b * elements + e`.
fn unshuffle(input: &[u8], element: usize, out: &mut [u8]) {
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
fn check_fletcher32(data: &[u8]) -> Result<(), String> {
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
    use std::io::Write;

    fn filters(ids: &[i32]) -> Vec<Filter> {
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

    fn sample(n: usize) -> Vec<u8> {
        (0..n as u32).flat_map(|i| (i / 3).to_le_bytes()).collect()
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
        assert_eq!(
            p.decode(&stored, 0, data.len(), &mut scratch).unwrap(),
            data
        );
        // Decoded again with the same scratch.
        assert_eq!(
            p.decode(&stored, 0, data.len(), &mut scratch).unwrap(),
            data
        );
    }

    #[test]
    fn skipped_filters_in_the_mask_are_not_undone() {
        let data = sample(64);
        // Deflate (filter 1) skipped: the chunk is shuffled bytes with a checksum.
        let stored = with_fletcher(&shuffle(&data, 4));
        let p = Pipeline::for_filters(&filters(&[2, 1, 3]), 4).unwrap();
        let mut scratch = Scratch::default();
        assert_eq!(
            p.decode(&stored, 0b010, data.len(), &mut scratch).unwrap(),
            data
        );
        // Everything skipped: the stored bytes are the chunk.
        assert_eq!(
            p.decode(&data, 0b111, data.len(), &mut scratch).unwrap(),
            data
        );
    }

    #[test]
    fn zstandard_and_lz4_chunks_decode() {
        let data = sample(5000);
        let mut scratch = Scratch::default();
        let z = zstd::bulk::compress(&data, 3).unwrap();
        let p = Pipeline::for_filters(&filters(&[32015]), 4).unwrap();
        assert_eq!(p.decode(&z, 0, data.len(), &mut scratch).unwrap(), data);
        // hdf5plugin's LZ4 framing with blocks of 8000 bytes: one coded, two stored as they are.
        let mut framed = (data.len() as u64).to_be_bytes().to_vec();
        framed.extend(8000u32.to_be_bytes());
        let coded = lz4::block::compress(&data[..8000], None, false).unwrap();
        framed.extend((coded.len() as u32).to_be_bytes());
        framed.extend(&coded);
        for block in data[8000..].chunks(8000) {
            framed.extend((block.len() as u32).to_be_bytes());
            framed.extend(block);
        }
        let p = Pipeline::for_filters(&filters(&[32004]), 4).unwrap();
        assert_eq!(
            p.decode(&framed, 0, data.len(), &mut scratch).unwrap(),
            data
        );
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
    }

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
        let body = sample(500);
        let sum = fletcher32(&body).to_le_bytes();
        let mut old = body.clone();
        old.extend([sum[1], sum[0], sum[3], sum[2]]);
        assert!(check_fletcher32(&old).is_ok());
        assert!(check_fletcher32(&[1, 2]).is_err());
    }
}
