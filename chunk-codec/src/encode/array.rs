//! A whole array written in chunks: cut into chunks that are gathered (edges zero-padded) and
//! encoded in parallel on the process's thread pool (`h5gds_runtime::pool`, the driver's I/O
//! threads) while the calling thread, which holds the caller's HDF5 lock, writes them raw in
//! chunk order through the caller's [`ChunkWriter`]. At most a bounded number of chunks are in
//! flight, so memory stays a few chunks per thread.

use super::{EncodeScratch, Encoding, Place};
use crate::in_flight::pool_and_slots;
use crate::place::{copy_box_into, Source};
use crate::step_buffers::room;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

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
        let part: Vec<u64> = (0..rank)
            .map(|k| self.chunk[k].min(self.shape[k] - offset[k]))
            .collect();
        if part != self.chunk {
            out.fill(0);
        }
        let steps = vec![1u64; rank];
        let src = Source {
            bytes: self.array,
            shape: self.shape,
            start: offset,
            step: &steps,
        };
        let origin = vec![0u64; rank];
        copy_box_into(&src, out, self.chunk, &origin, &part, self.element_size);
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
    // At least one chunk in flight (a gathered chunk and two encoder buffers each).
    let Some((pool, slots)) = pool_and_slots(w.threads, offsets.len(), w.chunk_bytes(), 1) else {
        let mut slot = Slot::default();
        for offset in &offsets {
            encode_caught(w, offset, &mut slot).map_err(|reason| sink.failed(offset, reason))?;
            sink.write(offset, w.stored(&slot))?;
        }
        return Ok(offsets.len());
    };
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
    use crate::encode::tests::{filter, sample};
    use crate::pipeline::{Filter, Pipeline, Scratch};
    use h5gds_route::route::{
        FILTER_DEFLATE, FILTER_FLETCHER32, FILTER_LZ4, FILTER_SHUFFLE, FILTER_ZSTD,
    };

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
