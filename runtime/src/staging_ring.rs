//! The staging ring: pinned host buffers taking turns, each with a CUDA stream (a *lane*), so
//! that the file side of one piece (`pread`, an HDF5 call, chunks decoded on the host) runs on
//! this thread while the copy of another piece between its buffer and the device runs on its
//! lane's stream. Reads fill a buffer and then queue its copy up ([`StagingRing::to_device`]);
//! writes queue a copy down and drain the buffer once it has landed
//! ([`StagingRing::from_device`]). What fills and drains a buffer is the caller's; the ring owns
//! the buffers (from the pool of [`crate::pinned`], given back when the ring is dropped), knows
//! which piece's copies may still use each one, and waits for them before the buffer is handed
//! out again, before an error is returned, and before the buffers go back to the pool.
//!
//! Its users: the driver's bounce buffers and the Python extension's staging (`cuda::Stream`s, one
//! pair per thread), array-io's host staging (the caller's cudarc stream and its fork), and the
//! GPU codec's slots, whose lanes' buffers take the stored chunks the host's threads read (and
//! whose streams carry their decoding too).

use crate::cuda::{self, CudaError, Direction};
use crate::pinned::Taken;
use crate::stream;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// A stream the ring queues copies on and waits for: the driver's per-thread streams
/// ([`cuda::Stream`]) or a cudarc stream.
pub trait RingStream: Clone {
    /// Queues a copy of `len` bytes from host memory `src` to device address `dst`.
    ///
    /// # Safety
    /// `src` must stay valid and unwritten until the stream is waited for; `dst .. dst + len`
    /// must be device memory of the stream's context.
    unsafe fn upload(&self, dst: u64, src: *const u8, len: usize) -> Result<(), CudaError>;

    /// Queues a copy of `len` bytes from device address `src` to host memory `dst`.
    ///
    /// # Safety
    /// `dst` must stay valid, and unread and unwritten by anything else, until the stream is
    /// waited for; `src .. src + len` must be device memory of the stream's context.
    unsafe fn download(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), CudaError>;

    /// Waits for everything queued on the stream.
    fn wait(&self) -> Result<(), CudaError>;
}

impl RingStream for cuda::Stream {
    unsafe fn upload(&self, dst: u64, src: *const u8, len: usize) -> Result<(), CudaError> {
        // SAFETY: the caller's contract; a copy up only reads the host buffer.
        unsafe { cuda::copy_async(Direction::Read, src.cast_mut(), dst, len, *self) }
    }
    unsafe fn download(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        unsafe { cuda::copy_async(Direction::Write, dst, src, len, *self) }
    }
    fn wait(&self) -> Result<(), CudaError> {
        cuda::synchronize(*self)
    }
}

impl RingStream for Arc<CudaStream> {
    unsafe fn upload(&self, dst: u64, src: *const u8, len: usize) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        unsafe { stream::copy_to_device(self, dst, src, len) }
    }
    unsafe fn download(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        unsafe { stream::copy_from_device(self, dst, src, len) }
    }
    fn wait(&self) -> Result<(), CudaError> {
        stream::synchronize(self)
    }
}

/// Why a transfer through the ring stopped: a step of the caller's failed, or one of the ring's
/// own CUDA calls (making its streams, waiting for a piece's copies) failed at piece `piece`.
#[derive(Debug)]
pub enum Stop<E> {
    Step(E),
    Cuda { piece: usize, error: CudaError },
}

impl<E: From<CudaError>> Stop<E> {
    /// The caller's error, for callers whose errors carry CUDA's and need not know the piece.
    pub fn into_error(self) -> E {
        match self {
            Stop::Step(e) => e,
            Stop::Cuda { error, .. } => error.into(),
        }
    }
}

/// The stop for a failed CUDA call of the ring's own, for piece `piece`.
fn stopped<E>((piece, error): (usize, CudaError)) -> Stop<E> {
    Stop::Cuda { piece, error }
}

/// Makes a ring's streams when it first needs them.
type MakeStreams<S> = Box<dyn FnOnce() -> Result<Vec<S>, CudaError>>;

/// One buffer and its stream.
struct Lane<S> {
    buffer: Option<Taken>,
    stream: Option<S>,
    /// The piece whose work was last queued on the stream, until it is waited for.
    pending: Option<usize>,
}

/// Host buffers taking turns, piece `k` using lane `k % lanes`; see the module's documentation.
pub struct StagingRing<S: RingStream> {
    lanes: Vec<Lane<S>>,
    make_streams: Option<MakeStreams<S>>,
}

/// Piece `k`'s buffer and stream, for queueing the piece's copies.
pub struct LaneCopies<'a, S> {
    host: *mut u8,
    len: usize,
    stream: &'a S,
}

impl<S: RingStream> LaneCopies<'_, S> {
    /// Queues a copy of `len` bytes at `at` in the buffer to device address `dst`.
    ///
    /// # Safety
    /// `dst .. dst + len` must be device memory of the stream's context, allocated until the
    /// ring has waited for the piece; the buffer's bytes `at .. at + len` must not be written
    /// again before then (the ring hands the buffer out only after it has waited).
    pub unsafe fn upload(&self, at: usize, dst: u64, len: usize) -> Result<(), CudaError> {
        assert!(
            at + len <= self.len,
            "a copy past the end of a staging buffer"
        );
        // SAFETY: the range lies in the buffer, which the ring keeps until it has waited for
        // the stream; the device side is the caller's contract.
        unsafe { self.stream.upload(dst, self.host.add(at), len) }
    }

    /// Queues a copy of `len` bytes from device address `src` to `at` in the buffer.
    ///
    /// # Safety
    /// `src .. src + len` must be device memory of the stream's context, allocated until the
    /// ring has waited for the piece; the buffer's bytes `at .. at + len` must not be used until
    /// then ([`StagingRing::from_device`] drains a buffer only after waiting).
    pub unsafe fn download(&self, at: usize, src: u64, len: usize) -> Result<(), CudaError> {
        assert!(
            at + len <= self.len,
            "a copy past the end of a staging buffer"
        );
        // SAFETY: as for `upload`.
        unsafe { self.stream.download(self.host.add(at), src, len) }
    }

    /// The stream the copies go on.
    pub fn stream(&self) -> &S {
        self.stream
    }
}

impl<S: RingStream> StagingRing<S> {
    /// One lane per stream (one or two), each with a buffer of `buffers`.
    pub fn new(buffers: Vec<Taken>, streams: Vec<S>) -> StagingRing<S> {
        assert_eq!(buffers.len(), streams.len(), "one buffer per stream");
        let lanes = buffers
            .into_iter()
            .zip(streams)
            .map(|(buffer, stream)| Lane {
                buffer: Some(buffer),
                stream: Some(stream),
                pending: None,
            })
            .collect();
        StagingRing {
            lanes,
            make_streams: None,
        }
    }

    /// Lanes with `buffers` whose streams `make` makes when the first piece is queued (a ring
    /// whose buffers are only filled and drained on this thread never makes any).
    pub fn streams_made_later(
        buffers: Vec<Taken>,
        make: impl FnOnce() -> Result<Vec<S>, CudaError> + 'static,
    ) -> StagingRing<S> {
        let lanes = buffers
            .into_iter()
            .map(|buffer| Lane {
                buffer: Some(buffer),
                stream: None,
                pending: None,
            })
            .collect();
        StagingRing {
            lanes,
            make_streams: Some(Box::new(make)),
        }
    }

    /// One lane per stream, whose buffers are taken from the pool when asked for
    /// ([`StagingRing::buffer_at_least`]).
    pub fn unbuffered(streams: Vec<S>) -> StagingRing<S> {
        let lanes = streams
            .into_iter()
            .map(|stream| Lane {
                buffer: None,
                stream: Some(stream),
                pending: None,
            })
            .collect();
        StagingRing {
            lanes,
            make_streams: None,
        }
    }

    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    fn lane_of(&self, piece: usize) -> usize {
        piece % self.lanes.len()
    }

    /// Waits for the work queued on piece `piece`'s lane, if any.
    pub fn wait(&mut self, piece: usize) -> Result<(), CudaError> {
        self.wait_lane(self.lane_of(piece))
            .map_err(|(_, error)| error)
    }

    /// Waits for the work queued on `lane`, if any; a failure names the piece it was for.
    fn wait_lane(&mut self, lane: usize) -> Result<(), (usize, CudaError)> {
        let lane = &mut self.lanes[lane];
        if let Some(piece) = lane.pending.take() {
            if let Some(stream) = &lane.stream {
                stream.wait().map_err(|error| (piece, error))?;
            }
        }
        Ok(())
    }

    /// Waits for the lane of piece `piece` where an earlier piece's work may still use it.
    fn free_for(&mut self, piece: usize) -> Result<(), (usize, CudaError)> {
        let lane = self.lane_of(piece);
        match self.lanes[lane].pending {
            Some(earlier) if earlier != piece => self.wait_lane(lane),
            _ => Ok(()),
        }
    }

    /// Piece `piece`'s buffer, once no earlier piece's copy uses it (a ring made with buffers,
    /// or after [`Self::buffer_at_least`]).
    pub fn buffer(&mut self, piece: usize) -> Result<&mut [u8], CudaError> {
        self.free_for(piece).map_err(|(_, error)| error)?;
        let lane = self.lane_of(piece);
        let taken = self.lanes[lane]
            .buffer
            .as_mut()
            .expect("a ring made with buffers");
        let (host, len) = (taken.as_mut_ptr(), taken.len());
        // SAFETY: the pool's buffer holds `len` bytes, owned by this ring and borrowed mutably
        // through it; no earlier piece's copy uses it (waited for above), and the piece's own
        // copies are ordered by the caller (`LaneCopies`' contracts).
        Ok(unsafe { std::slice::from_raw_parts_mut(host, len) })
    }

    /// Piece `piece`'s buffer, once no earlier piece's copy uses it, holding at least `len`
    /// bytes: a smaller one goes back to the pool for one of `len` (`Taken::new`'s sizes).
    pub fn buffer_at_least(&mut self, piece: usize, len: usize) -> Result<&mut [u8], CudaError> {
        self.free_for(piece).map_err(|(_, error)| error)?;
        let lane = self.lane_of(piece);
        let lane = &mut self.lanes[lane];
        if lane.buffer.as_ref().is_none_or(|b| b.len() < len) {
            lane.buffer = Some(Taken::new(len));
        }
        self.buffer(piece)
    }

    /// Piece `piece`'s lane stream, noting that work for the piece is queued on it (so it is
    /// waited for before the lane serves another piece, and before the ring goes).
    pub fn stream(&mut self, piece: usize) -> Result<S, CudaError> {
        if let Some(make) = self.make_streams.take() {
            let streams = make()?;
            assert_eq!(streams.len(), self.lanes.len(), "one stream per lane");
            for (lane, stream) in self.lanes.iter_mut().zip(streams) {
                lane.stream = Some(stream);
            }
        }
        let lane = self.lane_of(piece);
        let lane = &mut self.lanes[lane];
        // Without a stream only after making them failed once (`make` is gone).
        let stream = lane
            .stream
            .clone()
            .ok_or_else(|| CudaError::new("creating a stream", "an earlier attempt failed"))?;
        lane.pending = Some(piece);
        Ok(stream)
    }

    /// Piece `piece`'s buffer and stream, for queueing its copies (noted as [`Self::stream`]
    /// does).
    pub fn copies(&mut self, piece: usize) -> Result<LaneCopies<'_, S>, CudaError> {
        self.free_for(piece).map_err(|(_, error)| error)?;
        self.stream(piece)?;
        let lane = self.lane_of(piece);
        let lane = &mut self.lanes[lane];
        let taken = lane.buffer.as_mut().expect("a ring made with buffers");
        Ok(LaneCopies {
            host: taken.as_mut_ptr(),
            len: taken.len(),
            stream: lane.stream.as_ref().expect("made by `stream`"),
        })
    }

    /// Waits for the work queued on every lane, oldest piece first; the first failure.
    pub fn settle(&mut self) -> Result<(), CudaError> {
        self.settle_lanes().map_err(|(_, error)| error)
    }

    fn settle_lanes(&mut self) -> Result<(), (usize, CudaError)> {
        let mut waiting: Vec<(usize, usize)> = (0..self.lanes.len())
            .filter_map(|lane| self.lanes[lane].pending.map(|piece| (piece, lane)))
            .collect();
        waiting.sort_unstable();
        let mut first = Ok(());
        for (_, lane) in waiting {
            let waited = self.wait_lane(lane);
            first = first.and(waited);
        }
        first
    }

    /// Moves `pieces` pieces from the host to the device: `fill(k, buffer)` writes piece `k`
    /// into its buffer (once the lane's earlier copies have finished), then `send(k, copies)`
    /// queues the piece's copies up on the lane's stream, so that the next piece is filled while
    /// they run. Returns once every queued copy has finished, after a failure too.
    pub fn to_device<E>(
        &mut self,
        pieces: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), E>,
        mut send: impl FnMut(usize, &LaneCopies<S>) -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        let mut moved = || -> Result<(), Stop<E>> {
            for k in 0..pieces {
                self.free_for(k).map_err(stopped)?;
                fill(k, self.buffer(k).map_err(|e| stopped((k, e)))?).map_err(Stop::Step)?;
                let copies = self.copies(k).map_err(|e| stopped((k, e)))?;
                send(k, &copies).map_err(Stop::Step)?;
            }
            Ok(())
        };
        let moved = moved();
        self.finished(moved)
    }

    /// Moves `pieces` pieces from the device to the host: `fetch(k, copies)` queues piece `k`'s
    /// copies down into its buffer on the lane's stream, and `drain(k, buffer)` takes the piece
    /// from the buffer once they have landed, while the next piece's copies run (with two lanes
    /// or more). Returns once every queued copy has finished, after a failure too; after a
    /// failure nothing more is drained.
    pub fn from_device<E>(
        &mut self,
        pieces: usize,
        mut fetch: impl FnMut(usize, &LaneCopies<S>) -> Result<(), E>,
        mut drain: impl FnMut(usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        let ahead = self.lanes.len() > 1;
        let mut moved = || -> Result<(), Stop<E>> {
            let mut queue = |ring: &mut Self, k: usize| -> Result<(), Stop<E>> {
                ring.free_for(k).map_err(stopped)?;
                let copies = ring.copies(k).map_err(|e| stopped((k, e)))?;
                fetch(k, &copies).map_err(Stop::Step)
            };
            for k in 0..pieces {
                if k == 0 || !ahead {
                    queue(self, k)?;
                }
                let lane = self.lane_of(k);
                self.wait_lane(lane).map_err(stopped)?;
                // The next piece comes from the device while this one is drained.
                if ahead && k + 1 < pieces {
                    queue(self, k + 1)?;
                }
                drain(k, self.buffer(k).map_err(|e| stopped((k, e)))?).map_err(Stop::Step)?;
            }
            Ok(())
        };
        let moved = moved();
        self.finished(moved)
    }

    /// `moved`, once every lane is waited for: its error first, else the first failed wait.
    fn finished<E>(&mut self, moved: Result<(), Stop<E>>) -> Result<(), Stop<E>> {
        let settled = self.settle_lanes();
        moved?;
        settled.map_err(stopped)
    }
}

impl<S: RingStream> Drop for StagingRing<S> {
    fn drop(&mut self) {
        // A copy still queued must not meet a buffer another transfer has taken from the pool.
        let _ = self.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A queued copy: destination, source, bytes.
    type Copy = (*mut u8, *const u8, usize);

    /// A stream that records what is queued on it and waited for; its copies land at `wait`
    /// (as a GPU may run them late), so a buffer reused too early shows as wrong bytes.
    #[derive(Clone)]
    struct Recorded {
        id: usize,
        log: Rc<RefCell<Vec<String>>>,
        queued: Rc<RefCell<Vec<Copy>>>,
        fail_wait: Option<usize>,
    }

    impl RingStream for Recorded {
        unsafe fn upload(&self, dst: u64, src: *const u8, len: usize) -> Result<(), CudaError> {
            self.log.borrow_mut().push(format!("up{} {}", self.id, dst));
            self.queued.borrow_mut().push((dst as *mut u8, src, len));
            Ok(())
        }
        unsafe fn download(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), CudaError> {
            self.log
                .borrow_mut()
                .push(format!("down{} {}", self.id, src));
            self.queued.borrow_mut().push((dst, src as *const u8, len));
            Ok(())
        }
        fn wait(&self) -> Result<(), CudaError> {
            let waits = self
                .log
                .borrow()
                .iter()
                .filter(|l| l.starts_with("wait"))
                .count();
            self.log.borrow_mut().push(format!("wait{}", self.id));
            if self.fail_wait == Some(waits) {
                return Err(CudaError::new("cuStreamSynchronize", "injected"));
            }
            for (dst, src, len) in self.queued.borrow_mut().drain(..) {
                // SAFETY: the test's "device" memory and the ring's buffers, both live.
                unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
            }
            Ok(())
        }
    }

    fn streams(n: usize, fail_wait: Option<usize>) -> (Vec<Recorded>, Rc<RefCell<Vec<String>>>) {
        let log = Rc::new(RefCell::new(Vec::new()));
        let made = (0..n)
            .map(|id| Recorded {
                id,
                log: log.clone(),
                queued: Rc::new(RefCell::new(Vec::new())),
                fail_wait,
            })
            .collect();
        (made, log)
    }

    fn ring(
        lanes: usize,
        fail_wait: Option<usize>,
    ) -> (StagingRing<Recorded>, Rc<RefCell<Vec<String>>>) {
        let (streams, log) = streams(lanes, fail_wait);
        let buffers = (0..lanes).map(|_| Taken::exact(4)).collect();
        (StagingRing::new(buffers, streams), log)
    }

    #[test]
    fn a_read_fills_each_buffer_once_its_last_copy_has_landed() {
        for lanes in [1, 2] {
            let (mut ring, log) = ring(lanes, None);
            let mut device = [0u8; 20];
            let base = device.as_mut_ptr() as u64;
            ring.to_device::<()>(
                5,
                |k, buf| {
                    buf[..4].fill(k as u8 + 1);
                    Ok(())
                },
                // SAFETY: `device` holds the 4 bytes at 4 k and outlives the ring's waits.
                |k, copies| unsafe { copies.upload(0, base + 4 * k as u64, 4) }.map_err(drop),
            )
            .unwrap();
            assert_eq!(
                device,
                [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5]
            );
            let log = log.borrow();
            // Every piece's copy is waited for exactly once.
            assert_eq!(log.iter().filter(|l| l.starts_with("wait")).count(), 5);
            if lanes == 2 {
                assert_eq!(
                    log[..3],
                    [
                        "up0 ".to_string() + &base.to_string(),
                        format!("up1 {}", base + 4),
                        "wait0".into()
                    ]
                );
            }
        }
    }

    #[test]
    fn a_write_drains_each_piece_after_its_copy_while_the_next_runs() {
        for lanes in [1, 2] {
            let (mut ring, log) = ring(lanes, None);
            let device: Vec<u8> = (0..12).collect();
            let base = device.as_ptr() as u64;
            let mut file = Vec::new();
            ring.from_device::<()>(
                3,
                // SAFETY: `device` holds the 4 bytes at 4 k and outlives the ring's waits.
                |k, copies| unsafe { copies.download(0, base + 4 * k as u64, 4) }.map_err(drop),
                |_, buf| {
                    file.extend_from_slice(&buf[..4]);
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(file, device);
            let log = log.borrow();
            let waits = log.iter().filter(|l| l.starts_with("wait")).count();
            assert_eq!(waits, 3, "{log:?}");
            if lanes == 2 {
                // Piece 1's copy is queued before piece 0 is drained.
                assert_eq!(
                    log[..3],
                    [
                        format!("down0 {base}"),
                        "wait0".into(),
                        format!("down1 {}", base + 4)
                    ]
                );
            }
        }
    }

    #[test]
    fn a_failure_stops_the_transfer_after_waiting_and_names_its_piece() {
        // A step's error: nothing more is filled, and the queued copies are waited for.
        let (mut ring, log) = ring(2, None);
        let mut device = [0u8; 12];
        let base = device.as_mut_ptr() as u64;
        let mut filled = Vec::new();
        let stop = ring.to_device(
            3,
            |k, _| {
                filled.push(k);
                if k == 1 {
                    return Err("no bytes");
                }
                Ok(())
            },
            // SAFETY: as above.
            |k, copies| unsafe { copies.upload(0, base + 4 * k as u64, 4) }.map_err(|_| "copy"),
        );
        assert!(matches!(stop, Err(Stop::Step("no bytes"))));
        assert_eq!(filled, [0, 1]);
        assert_eq!(*log.borrow().last().unwrap(), "wait0");
        // A failed wait names the piece whose copies it waited for: the second wait is piece 1's.
        let (mut ring, _) = ring_failing(1);
        let stop = ring.to_device::<()>(
            4,
            |_, _| Ok(()),
            // SAFETY: as above.
            |k, copies| unsafe { copies.upload(0, base + 4 * (k % 3) as u64, 4) }.map_err(drop),
        );
        assert!(matches!(stop, Err(Stop::Cuda { piece: 1, .. })), "{stop:?}");
    }

    fn ring_failing(wait: usize) -> (StagingRing<Recorded>, Rc<RefCell<Vec<String>>>) {
        ring(2, Some(wait))
    }

    #[test]
    fn streams_are_made_when_the_first_copy_is_queued_and_buffers_grow_when_asked() {
        let made = Rc::new(RefCell::new(0));
        let counted = made.clone();
        let mut ring =
            StagingRing::streams_made_later(vec![Taken::exact(8), Taken::exact(8)], move || {
                *counted.borrow_mut() += 1;
                Ok(streams(2, None).0)
            });
        ring.buffer(0).unwrap()[0] = 1;
        assert_eq!(*made.borrow(), 0);
        ring.stream(0).unwrap();
        ring.stream(1).unwrap();
        assert_eq!(*made.borrow(), 1);
        ring.settle().unwrap();
        let mut ring = StagingRing::unbuffered(streams(1, None).0);
        assert!(ring.buffer_at_least(0, 100).unwrap().len() >= 100);
        assert!(ring.buffer_at_least(1, 1 << 20).unwrap().len() >= 1 << 20);
    }
}
