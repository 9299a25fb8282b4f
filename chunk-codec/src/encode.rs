//! HDF5's compressed chunks written from the host: a chunk's bytes turned into the bytes its
//! dataset's filter pipeline stores ([`Encoding::encode`], the inverse of
//! [`Pipeline::decode`](crate::Pipeline::decode)), and a whole array cut into chunks that are
//! gathered and encoded in parallel on the process's thread pool (`h5gds_runtime::pool`, the
//! driver's I/O threads) while the calling thread, which holds the caller's HDF5 lock, writes
//! them raw in chunk order ([`write`], through the caller's [`ChunkWriter`]). At most a bounded
//! number of chunks are in flight, so memory stays a few chunks per thread.
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

use crate::pipeline::{fletcher32, Filter, Pipeline, Stage};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

/// The LZ4 filter's block size when its client value is 0 (or missing).
pub const LZ4_DEFAULT_BLOCK: usize = 1 << 30;

/// The bytes of the LZ4 framing before the first block: decoded size and block size.
const LZ4_HEADER: usize = 12;

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

/// `buf`'s first `n` bytes, grown (zero-filled) if it is shorter.
fn room(buf: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if buf.len() < n {
        buf.resize(n, 0);
    }
    &mut buf[..n]
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
        let (first, second) = bufs.split_at_mut(1);
        let mut at = Place::Input;
        for &step in &self.steps {
            // The data now, and the buffer free to take the step's output.
            let (input, spare, k): (&[u8], &mut Vec<u8>, usize) = match at {
                Place::Input => (chunk, &mut first[0], 0),
                Place::Buffer(0, len) => (&first[0][..len], &mut second[0], 1),
                Place::Buffer(_, len) => (&second[0][..len], &mut first[0], 0),
            };
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

/// The shuffle filter: byte `b` of element `e` goes to `b * elements + e`; bytes past the last
/// whole element stay at the end.
fn shuffle(input: &[u8], element: usize, out: &mut [u8]) {
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

/// hdf5plugin's LZ4 framing of `input` in blocks of `block` bytes (at most the input) into
/// `spare`; returns the stored length.
fn encode_lz4(input: &[u8], block: usize, spare: &mut Vec<u8>) -> Result<usize, String> {
    let total = input.len();
    let block = block.min(total).max(1);
    let block32 = u32::try_from(block)
        .map_err(|_| format!("the LZ4 block size {block} does not fit the filter's header"))?;
    let blocks = total.div_ceil(block);
    // Each block stores at most its own bytes (LZ4's output is kept only when smaller).
    let out = room(spare, LZ4_HEADER + 4 * blocks + total);
    out[..8].copy_from_slice(&(total as u64).to_be_bytes());
    out[8..12].copy_from_slice(&block32.to_be_bytes());
    let mut at = LZ4_HEADER;
    for piece in input.chunks(block) {
        let body = at + 4;
        // Room for one byte less than the block: LZ4 fails exactly when its output would not be
        // smaller, and then the block is stored as it is.
        let limit = body + piece.len() - 1;
        let stored = match lz4::block::compress_to_buffer(piece, None, false, &mut out[body..limit])
        {
            Ok(n) if n > 0 && n < piece.len() => n,
            _ => {
                out[body..body + piece.len()].copy_from_slice(piece);
                piece.len()
            }
        };
        out[at..body].copy_from_slice(&(stored as u32).to_be_bytes());
        at = body + stored;
    }
    Ok(at)
}

/// Where stored chunks go: the caller's HDF5 binding (a raw chunk write). Called on the calling
/// thread only, in chunk order.
pub trait ChunkWriter {
    /// The caller's error.
    type Error: Send;

    /// Writes the stored bytes of the chunk whose first element is `offset` (filter mask 0).
    fn write(&mut self, offset: &[u64], stored: &[u8]) -> Result<(), Self::Error>;

    /// The error for the chunk at `offset`, which could not be encoded for `reason`.
    fn failed(&self, offset: &[u64], reason: String) -> Self::Error;
}

/// One array written in chunks.
pub struct HostWrite<'a> {
    pub encoding: &'a Encoding,
    /// The array's elements, row-major (`shape`'s product times `element_size` bytes).
    pub array: &'a [u8],
    pub shape: &'a [u64],
    /// The chunk shape, in elements (one positive entry per axis).
    pub chunk: &'a [u64],
    /// Bytes per element.
    pub element_size: usize,
    /// Encoding threads (the driver's I/O thread count); 1 encodes on the calling thread.
    pub threads: usize,
}

/// Chunk bytes (gathered input and encoder buffers) that may be in flight at once.
const IN_FLIGHT_BYTES: usize = 512 << 20;

/// One chunk's input buffer and the scratch that encodes it, reused from chunk to chunk, and
/// where its stored bytes are once encoded.
#[derive(Default)]
struct Slot {
    gathered: Vec<u8>,
    scratch: EncodeScratch,
    place: Option<Stored>,
}

/// Where a slot's stored bytes are.
#[derive(Clone, Copy)]
enum Stored {
    /// A run of the array itself (a chunk that is one run of it, no step changed it).
    Array(usize),
    /// The slot's gathered chunk (no step changed it).
    Gathered,
    Buffer(usize, usize),
}

impl HostWrite<'_> {
    fn chunk_bytes(&self) -> usize {
        self.chunk.iter().product::<u64>() as usize * self.element_size
    }

    /// The first element of every chunk, in row-major chunk order.
    fn offsets(&self) -> Vec<Vec<u64>> {
        let mut all = vec![Vec::new()];
        for (&n, &c) in self.shape.iter().zip(self.chunk) {
            let starts: Vec<u64> = (0..n).step_by(c.max(1) as usize).collect();
            all = all
                .into_iter()
                .flat_map(|prefix| {
                    starts.iter().map(move |&s| {
                        let mut o = prefix.clone();
                        o.push(s);
                        o
                    })
                })
                .collect();
        }
        all
    }

    /// The byte offset in the array of the chunk at `offset` when its elements are one run of
    /// the array (leading chunk axes of 1, trailing ones whole, nothing cut at an edge).
    fn contiguous_run(&self, offset: &[u64]) -> Option<usize> {
        let rank = self.shape.len();
        let split = self.chunk.iter().position(|&c| c != 1).unwrap_or(rank);
        let whole_after = (split + 1..rank).all(|k| self.chunk[k] == self.shape[k]);
        let inside = (0..rank).all(|k| offset[k] + self.chunk[k] <= self.shape[k]);
        if !(whole_after && inside) {
            return None;
        }
        let at = (0..rank).fold(0u64, |at, k| at * self.shape[k] + offset[k]);
        Some(at as usize * self.element_size)
    }

    /// Copies the chunk at `offset` out of the array into `out` (a whole chunk), the part
    /// outside the array zero, as HDF5 pads edge chunks (with the default fill value, 0).
    fn gather(&self, offset: &[u64], out: &mut [u8]) {
        let rank = self.shape.len();
        let es = self.element_size as u64;
        let part: Vec<u64> = (0..rank)
            .map(|k| self.chunk[k].min(self.shape[k] - offset[k]))
            .collect();
        if part != self.chunk {
            out.fill(0);
        }
        if part.contains(&0) {
            return;
        }
        let run = (part[rank - 1] * es) as usize;
        // Walk the rows of the part (every axis but the last), odometer style.
        let mut index = vec![0u64; rank.saturating_sub(1)];
        loop {
            let i = |k: usize| index.get(k).copied().unwrap_or(0);
            let src = (0..rank).fold(0u64, |at, k| at * self.shape[k] + offset[k] + i(k));
            let dst = (0..rank).fold(0u64, |at, k| at * self.chunk[k] + i(k));
            let (src, dst) = ((src * es) as usize, (dst * es) as usize);
            out[dst..dst + run].copy_from_slice(&self.array[src..src + run]);
            let mut k = index.len();
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                index[k] += 1;
                if index[k] < part[k] {
                    break;
                }
                index[k] = 0;
            }
        }
    }

    /// Gathers (where needed) and encodes the chunk at `offset` into `slot`.
    fn encode(&self, offset: &[u64], slot: &mut Slot) -> Result<(), String> {
        let Slot {
            gathered,
            scratch,
            place,
        } = slot;
        let (input, direct) = match self.contiguous_run(offset) {
            Some(at) => (&self.array[at..at + self.chunk_bytes()], Some(at)),
            None => {
                let bytes = self.chunk_bytes();
                let buf = room(gathered, bytes);
                self.gather(offset, buf);
                (&buf[..], None)
            }
        };
        *place = Some(match (self.encoding.run(input, scratch)?, direct) {
            (Place::Input, Some(at)) => Stored::Array(at),
            (Place::Input, None) => Stored::Gathered,
            (Place::Buffer(k, len), _) => Stored::Buffer(k, len),
        });
        Ok(())
    }

    /// A slot's stored bytes.
    fn stored<'s>(&'s self, slot: &'s Slot) -> &'s [u8] {
        match slot.place.expect("the slot was encoded") {
            Stored::Array(at) => &self.array[at..at + self.chunk_bytes()],
            Stored::Gathered => &slot.gathered[..self.chunk_bytes()],
            Stored::Buffer(k, len) => &slot.scratch.bufs[k][..len],
        }
    }
}

/// `w.encode` with a panic turned into the chunk's error.
fn encode_caught(w: &HostWrite, offset: &[u64], slot: &mut Slot) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| w.encode(offset, slot)))
        .unwrap_or_else(|_| Err("encoding it panicked".into()))
}

/// Writes every chunk of `w`'s array through `sink`, in row-major chunk order; returns the
/// number of chunks written. On an error nothing more is written (chunks already written stay).
pub fn write<W: ChunkWriter>(sink: &mut W, w: &HostWrite) -> Result<usize, W::Error> {
    let elements: u64 = w.shape.iter().product();
    assert_eq!(
        w.array.len() as u64,
        elements * w.element_size as u64,
        "the array holds its shape's elements"
    );
    assert!(
        w.chunk.len() == w.shape.len() && w.chunk.iter().all(|&c| c > 0),
        "one positive chunk entry per axis"
    );
    if elements == 0 {
        return Ok(0);
    }
    let offsets = w.offsets();
    let chunk_bytes = w.chunk_bytes().max(1);
    let pool = (w.threads > 1 && offsets.len() > 1)
        .then(|| h5gds_runtime::pool::for_waiting_caller(w.threads))
        .flatten();
    let Some(pool) = pool else {
        let mut slot = Slot::default();
        for offset in &offsets {
            encode_caught(w, offset, &mut slot).map_err(|reason| sink.failed(offset, reason))?;
            sink.write(offset, w.stored(&slot))?;
        }
        return Ok(offsets.len());
    };
    // Chunks in flight: enough to keep every thread busy while the calling thread writes,
    // within the memory bound (a gathered chunk and two encoder buffers per slot).
    let slots = (2 * w.threads)
        .min(IN_FLIGHT_BYTES / (3 * chunk_bytes))
        .clamp(1, offsets.len());
    let (done, finished) = mpsc::channel::<(usize, Slot, Result<(), String>)>();
    let mut free: Vec<Slot> = (0..slots).map(|_| Slot::default()).collect();
    let mut result = Ok(());
    pool.in_place_scope(|scope| {
        // Encoded chunks waiting for their turn to be written, by index.
        let mut ready: BTreeMap<usize, (Slot, Result<(), String>)> = BTreeMap::new();
        let (mut next_spawn, mut next_write, mut in_flight) = (0usize, 0usize, 0usize);
        while next_write < offsets.len() {
            while result.is_ok() && next_spawn < offsets.len() {
                let Some(mut slot) = free.pop() else { break };
                let (i, done, offset) = (next_spawn, done.clone(), &offsets[next_spawn]);
                scope.spawn(move |_| {
                    let outcome = encode_caught(w, offset, &mut slot);
                    let _ = done.send((i, slot, outcome));
                });
                next_spawn += 1;
                in_flight += 1;
            }
            if in_flight == 0 {
                break;
            }
            // Every task sends its slot back (its body cannot panic past catch_unwind).
            let Ok((i, slot, outcome)) = finished.recv() else {
                break;
            };
            in_flight -= 1;
            ready.insert(i, (slot, outcome));
            while let Some((slot, outcome)) = ready.remove(&next_write) {
                if result.is_ok() {
                    let offset = &offsets[next_write];
                    result = outcome
                        .map_err(|reason| sink.failed(offset, reason))
                        .and_then(|()| sink.write(offset, w.stored(&slot)));
                }
                free.push(slot);
                next_write += 1;
            }
            if result.is_err() && in_flight == 0 {
                break;
            }
        }
    });
    result?;
    tracing::debug!(
        "encoded {} chunks on {} threads ({} in flight)",
        offsets.len(),
        w.threads,
        slots
    );
    Ok(offsets.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Scratch;
    use h5gds_route::route::{
        FILTER_DEFLATE, FILTER_FLETCHER32, FILTER_LZ4, FILTER_SHUFFLE, FILTER_ZSTD,
    };

    fn filter(id: i32, values: &[u32]) -> Filter {
        Filter {
            id,
            values: values.to_vec(),
        }
    }

    /// Compressible bytes with some noise: u32 values that repeat and drift.
    fn sample(n: usize) -> Vec<u8> {
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

    /// Chunks written to memory, each decoded again and placed back into an array.
    #[derive(Debug)]
    struct Memory {
        chunks: Vec<(Vec<u64>, Vec<u8>)>,
        fail_write: Option<Vec<u64>>,
    }

    impl ChunkWriter for Memory {
        type Error = String;
        fn write(&mut self, offset: &[u64], stored: &[u8]) -> Result<(), String> {
            if self.fail_write.as_deref() == Some(offset) {
                return Err(format!("write of {offset:?} failed"));
            }
            self.chunks.push((offset.to_vec(), stored.to_vec()));
            Ok(())
        }
        fn failed(&self, offset: &[u64], reason: String) -> String {
            format!("chunk {offset:?}: {reason}")
        }
    }

    fn write_all(
        filters: &[Filter],
        shape: &[u64],
        chunk: &[u64],
        threads: usize,
        fail_write: Option<Vec<u64>>,
    ) -> Result<(Vec<u8>, Memory), String> {
        let es = 4;
        let n: u64 = shape.iter().product();
        let array = sample(n as usize);
        let encoding = Encoding::for_filters(filters, es).unwrap();
        let w = HostWrite {
            encoding: &encoding,
            array: &array,
            shape,
            chunk,
            element_size: es,
            threads,
        };
        let mut m = Memory {
            chunks: Vec::new(),
            fail_write,
        };
        let written = write(&mut m, &w)?;
        assert_eq!(written, m.chunks.len());
        Ok((array, m))
    }

    /// The array rebuilt from the chunks (each decoded, its part inside the array placed).
    fn rebuild(filters: &[Filter], shape: &[u64], chunk: &[u64], m: &Memory) -> Vec<u8> {
        let es = 4usize;
        let n: u64 = shape.iter().product();
        let mut out = vec![0u8; n as usize * es];
        let chunk_bytes = chunk.iter().product::<u64>() as usize * es;
        let pipeline = (!filters.is_empty()).then(|| Pipeline::for_filters(filters, es).unwrap());
        let mut scratch = Scratch::default();
        for (offset, stored) in &m.chunks {
            let bytes = match &pipeline {
                Some(p) => p
                    .decode(stored, 0, chunk_bytes, &mut scratch)
                    .unwrap()
                    .to_vec(),
                None => stored.clone(),
            };
            assert_eq!(bytes.len(), chunk_bytes);
            let rank = shape.len();
            for flat in 0..chunk.iter().product::<u64>() {
                // Index in the chunk, then in the array.
                let (mut rest, mut index) = (flat, vec![0u64; rank]);
                for k in (0..rank).rev() {
                    index[k] = rest % chunk[k];
                    rest /= chunk[k];
                }
                let outside = (0..rank).any(|k| offset[k] + index[k] >= shape[k]);
                let e = flat as usize * es;
                if outside {
                    assert_eq!(&bytes[e..e + es], &[0; 4], "padding is zero");
                    continue;
                }
                let mut at = 0u64;
                for k in 0..rank {
                    at = at * shape[k] + offset[k] + index[k];
                }
                let at = at as usize * es;
                out[at..at + es].copy_from_slice(&bytes[e..e + es]);
            }
        }
        out
    }

    #[test]
    fn arrays_are_written_whole_in_chunk_order_on_one_and_many_threads() {
        let zstd_shuffled = vec![filter(FILTER_SHUFFLE, &[4]), filter(FILTER_ZSTD, &[3])];
        let lz4 = vec![filter(FILTER_LZ4, &[0]), filter(FILTER_FLETCHER32, &[])];
        for threads in [1, 3] {
            for (filters, shape, chunk) in [
                (zstd_shuffled.clone(), vec![1000], vec![64]),
                (zstd_shuffled.clone(), vec![50, 37], vec![8, 5]),
                // Chunks that are runs of the array (encoded without a copy), and an edge.
                (lz4.clone(), vec![21, 10], vec![4, 10]),
                (lz4.clone(), vec![5, 6, 7], vec![1, 3, 7]),
                (vec![], vec![9, 4, 5], vec![2, 3, 2]),
                (vec![filter(FILTER_DEFLATE, &[4])], vec![7], vec![7]),
            ] {
                let (array, m) = write_all(&filters, &shape, &chunk, threads, None).unwrap();
                let offsets: Vec<_> = m.chunks.iter().map(|(o, _)| o.clone()).collect();
                let w = HostWrite {
                    encoding: &Encoding::for_filters(&filters, 4).unwrap(),
                    array: &array,
                    shape: &shape,
                    chunk: &chunk,
                    element_size: 4,
                    threads,
                };
                assert_eq!(offsets, w.offsets(), "row-major chunk order");
                assert_eq!(
                    rebuild(&filters, &shape, &chunk, &m),
                    array,
                    "{filters:?} {shape:?} {chunk:?} on {threads} threads"
                );
            }
        }
    }

    #[test]
    fn a_failed_write_stops_the_writing() {
        let f = [filter(FILTER_ZSTD, &[1])];
        for threads in [1, 4] {
            let e = write_all(&f, &[50, 37], &[8, 5], threads, Some(vec![16, 10])).unwrap_err();
            assert_eq!(e, "write of [16, 10] failed");
        }
    }
}
