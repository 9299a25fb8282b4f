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

    /// Whether the first bytes of a chunk stored with filter mask `mask` decode without the rest:
    /// the one stage applied is Zstandard or LZ4, which decode front to back (shuffle spreads
    /// each element's bytes over the whole chunk, Fletcher-32 checks all of it, and libdeflate
    /// decodes whole streams only).
    pub fn decodes_prefix(&self, mask: u32) -> bool {
        let mut applied = self
            .stages
            .iter()
            .enumerate()
            .filter(|&(i, _)| i >= 32 || mask & (1 << i) == 0);
        matches!(
            (applied.next(), applied.next()),
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
            .any(|(i, s)| (i >= 32 || mask & (1 << i) == 0) && *s == Stage::Lz4);
        lz4 || wanted <= chunk_bytes / 2
    }

    /// Decodes the first `dest.len()` bytes of a chunk of `chunk_bytes` into `dest`, where
    /// [`Pipeline::decodes_prefix`] says so (else an error): a read that needs only the chunk's
    /// first rows stops decoding there. The error says why the chunk cannot be decoded.
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
        CHUNKS_DECODED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stage = self
            .stages
            .iter()
            .enumerate()
            .find(|&(i, _)| i >= 32 || mask & (1 << i) == 0)
            .map(|(_, s)| *s);
        if stage == Some(Stage::Lz4) {
            return decode_lz4_prefix(stored, chunk_bytes, dest);
        }
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
            ..
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

// liblz4's partial block decoder, from the library lz4-sys builds and links (which declares no
// binding of it): decodes at least `target_output_size` bytes of a block (or all of a shorter
// one) into `dst`, writing at most `dst_capacity`; returns the bytes written, or a negative
// number for a malformed block. Never reads or writes out of bounds.
extern "C" {
    fn LZ4_decompress_safe_partial(
        src: *const std::ffi::c_char,
        dst: *mut std::ffi::c_char,
        src_size: std::ffi::c_int,
        target_output_size: std::ffi::c_int,
        dst_capacity: std::ffi::c_int,
    ) -> std::ffi::c_int;
}

/// hdf5plugin's LZ4 framing, the first `dest.len()` bytes of a chunk of `chunk_bytes`: the
/// blocks before them decoded whole, the one they end in decoded partly.
fn decode_lz4_prefix(input: &[u8], chunk_bytes: usize, dest: &mut [u8]) -> Result<(), String> {
    let wanted = dest.len();
    let pieces = format::lz4_pieces(input.len(), chunk_bytes, |at, len| {
        input
            .get(at..at + len)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format!("its LZ4 framing runs past its end at byte {at}"))
    })?;
    for p in pieces.iter().filter(|p| p.out_at < wanted) {
        let take = p.out_len.min(wanted - p.out_at);
        let (src, dst) = (
            &input[p.at..p.at + p.len],
            &mut dest[p.out_at..p.out_at + take],
        );
        if !p.coded {
            dst.copy_from_slice(&src[..take]);
            continue;
        }
        let too_large = |what: usize| {
            std::ffi::c_int::try_from(what)
                .map_err(|_| format!("its LZ4 block at byte {} is too large to decode", p.at))
        };
        let (src_size, target) = (too_large(src.len())?, too_large(take)?);
        // SAFETY: `src` and `dst` are live slices of the sizes given; the decoder writes at most
        // `dst_capacity` (= `dst.len()`) bytes and reads at most `src_size`.
        let n = unsafe {
            LZ4_decompress_safe_partial(
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                src_size,
                target,
                target,
            )
        };
        if n < target {
            return Err(format!(
                "its LZ4 block at byte {} does not decode ({n} of the first {take} bytes)",
                p.at
            ));
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

    /// `data` in hdf5plugin's LZ4 framing, in blocks of `block` bytes, those `stored_as_is` picks
    /// (by index) stored uncoded, the others LZ4-coded.
    fn lz4_framed(data: &[u8], block: usize, stored_as_is: impl Fn(usize) -> bool) -> Vec<u8> {
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
        assert_eq!(p.decode(&z, 0, data.len(), &mut scratch).unwrap(), data);
        // Blocks of 8000 bytes: one coded, two stored as they are.
        let framed = lz4_framed(&data, 8000, |k| k > 0);
        let p = Pipeline::for_filters(&filters(&[32004]), 4).unwrap();
        assert_eq!(
            p.decode(&framed, 0, data.len(), &mut scratch).unwrap(),
            data
        );
    }

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
