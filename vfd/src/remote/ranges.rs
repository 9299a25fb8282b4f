//! Many byte ranges of one remote object read at once, for reads that know all they need before
//! they start (the engine's read with no HDF5 call, and the driver's large reads): neighbours
//! coalesced into one ranged GET (up to `request_size`, gaps up to [`COALESCE_GAP`]), a large
//! range split into GETs of `request_size`, `in_flight` GETs at a time, each conditional on the
//! ETag seen at open.
//!
//! - [`RemoteFile::read_pieces`]: ranges into the caller's buffers, each response's body copied
//!   once, straight from the connection's frames into place (no whole-response buffer first).
//! - [`RemoteFile::in_order`]: ranges handed back one by one in the order given, fetched ahead
//!   on the runtime while the caller works on the ones before (the chunks a decoder takes in
//!   turn), each as soon as its bytes have arrived, at most `in_flight` GETs ahead of the caller.

use super::{block_on, runtime, RemoteFile};
use crate::error::{Error, Result};
use bytes::{Buf, Bytes, BytesMut};
use futures_util::{StreamExt, TryStreamExt};
use object_store::{GetOptions, GetRange, GetResult, ObjectStore};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Ranges at most this far apart are fetched by one GET (the gap's bytes fetched and dropped):
/// one request fewer costs a round trip more than these bytes take on any link worth using.
pub const COALESCE_GAP: u64 = 64 << 10;

/// One GET: its byte range, and the destinations inside it (offset from the range's start).
struct Group<'a> {
    range: Range<u64>,
    dests: Vec<(u64, &'a mut [u8])>,
}

/// Groups `pieces` (address, destination) into GETs: sorted by address, neighbours within
/// [`COALESCE_GAP`] together up to `request_size`, a piece larger than that split.
fn groups(mut pieces: Vec<(u64, &mut [u8])>, request_size: u64) -> Vec<Group<'_>> {
    pieces.sort_by_key(|(addr, _)| *addr);
    let mut out: Vec<Group> = Vec::new();
    for (addr, buf) in pieces {
        let mut at = addr;
        let mut rest = buf;
        while !rest.is_empty() {
            let end = at + rest.len() as u64;
            match out.last_mut() {
                Some(g)
                    if at >= g.range.end
                        && at - g.range.end <= COALESCE_GAP
                        && end - g.range.start <= request_size =>
                {
                    g.dests
                        .push((at - g.range.start, std::mem::take(&mut rest)));
                    g.range.end = end;
                }
                _ => {
                    let take = (rest.len() as u64).min(request_size) as usize;
                    let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
                    out.push(Group {
                        range: at..at + take as u64,
                        dests: vec![(0, head)],
                    });
                    at += take as u64;
                    rest = tail;
                    continue;
                }
            }
        }
    }
    out
}

/// Ranges in the order given, coalesced where each follows the last within [`COALESCE_GAP`],
/// up to `request_size` a GET: each GET's range and the ranges it serves.
fn ordered_groups(ranges: &[Range<u64>], request_size: u64) -> Vec<(Range<u64>, Vec<Range<u64>>)> {
    let mut out: Vec<(Range<u64>, Vec<Range<u64>>)> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some((g, members))
                if r.start >= g.end
                    && r.start - g.end <= COALESCE_GAP
                    && r.end - g.start <= request_size =>
            {
                g.end = r.end;
                members.push(r.clone());
            }
            _ => out.push((r.clone(), vec![r.clone()])),
        }
    }
    out
}

impl RemoteFile {
    /// The options of a GET of `range`, conditional on the version opened.
    pub(super) fn get_options(&self, range: Range<u64>) -> GetOptions {
        GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: self.etag.clone(),
            version: self.version.clone(),
            ..GetOptions::default()
        }
    }

    /// One GET of `range`, conditional on the version opened and counted: its answer, whose
    /// body the caller takes.
    async fn get_counted(
        &self,
        store: &Arc<dyn ObjectStore>,
        range: &Range<u64>,
    ) -> Result<GetResult> {
        self.counters.gets.fetch_add(1, Relaxed);
        store
            .get_opts(&self.path, self.get_options(range.clone()))
            .await
            .map_err(|e| self.request_error(range, e))
    }

    /// The error of a GET of `range` that failed: a failed precondition says the object changed.
    pub(super) fn request_error(&self, range: &Range<u64>, e: object_store::Error) -> Error {
        let why = match e {
            object_store::Error::Precondition { .. } => format!(
                "the object changed since it was opened (its ETag is no longer {}): reopen the \
                 file to read the new version",
                self.etag.as_deref().unwrap_or("the one opened")
            ),
            other => super::explain(&other, &self.url),
        };
        self.range_error(range, why)
    }

    fn range_error(&self, range: &Range<u64>, why: String) -> Error {
        Error::RemoteRead {
            url: self.url.clone(),
            offset: range.start,
            size: range.end - range.start,
            why,
        }
    }

    /// Fails for a range past the object's end: the engine reads only bytes its chunk index or
    /// layout says exist, so such an address is an error (the driver zero-fills before asking).
    fn check_inside(&self, range: &Range<u64>) -> Result<()> {
        if range.end > self.size {
            return Err(self.range_error(
                range,
                format!("past the object's end (it has {} bytes)", self.size),
            ));
        }
        Ok(())
    }

    /// One GET of `g.range`, its body copied frame by frame into the destinations.
    async fn get_into(&self, store: &Arc<dyn ObjectStore>, g: Group<'_>) -> Result<()> {
        let Group { range, mut dests } = g;
        let mut body = self.get_counted(store, &range).await?.into_stream();
        let len = range.end - range.start;
        // The offset of the next body byte in the range, and the first destination not full.
        let (mut at, mut next) = (0u64, 0usize);
        while let Some(frame) = body.next().await {
            let frame = frame.map_err(|e| self.request_error(&range, e))?;
            let frame_end = at + frame.len() as u64;
            if frame_end > len {
                return Err(self.range_error(
                    &range,
                    format!("the server answered more than the {len} bytes asked"),
                ));
            }
            while next < dests.len() {
                let (off, dest) = &mut dests[next];
                let dest_end = *off + dest.len() as u64;
                let (from, to) = (at.max(*off), frame_end.min(dest_end));
                if from < to {
                    dest[(from - *off) as usize..(to - *off) as usize]
                        .copy_from_slice(&frame[(from - at) as usize..(to - at) as usize]);
                }
                if dest_end <= frame_end {
                    next += 1;
                } else {
                    break;
                }
            }
            self.counters.bytes.fetch_add(frame.len() as u64, Relaxed);
            at = frame_end;
        }
        if at != len {
            return Err(self.range_error(
                &range,
                format!("the server answered {at} of the {len} bytes asked"),
            ));
        }
        Ok(())
    }

    /// Reads every piece (address, destination: all of it, inside the object) at once:
    /// neighbours coalesced, large pieces split, `in_flight` GETs at a time, each body copied
    /// once into place. On an error, the destinations may hold some of their bytes.
    pub fn read_pieces(&self, mut pieces: Vec<(u64, &mut [u8])>) -> Result<()> {
        for (addr, buf) in &pieces {
            self.check_inside(&(*addr..addr.saturating_add(buf.len() as u64)))?;
        }
        // One small piece (a small dataset's bytes, next to the metadata HDF5 just read): the
        // block cache may hold it already, and fetches its neighbours for the next one.
        if let [(addr, buf)] = &mut pieces[..] {
            if buf.len() as u64 <= super::CACHE_BLOCK {
                return self.read(*addr, buf);
            }
        }
        let groups = groups(pieces, self.settings.request_size.max(1) as u64);
        if groups.is_empty() {
            return Ok(());
        }
        let store = self.store()?;
        let in_flight = self.settings.in_flight.max(1);
        block_on(
            futures_util::stream::iter(groups)
                .map(|g| self.get_into(&store, g))
                .buffer_unordered(in_flight)
                .try_collect::<()>(),
        )?
    }

    /// The bytes of `ranges` (each inside the object), handed back one by one in this order by
    /// [`InOrder::next_into`], fetched ahead meanwhile on the runtime: ranges that follow one
    /// another within [`COALESCE_GAP`] share a GET (up to `request_size`), `in_flight` GETs
    /// fetched ahead of the reader at a time. Each range is handed over as soon as its last byte
    /// has arrived, not when its GET's whole answer has (a decoder starts on the first chunk
    /// one round trip after the read starts). Dropping the reader stops the fetching.
    pub fn in_order(self: &Arc<Self>, ranges: Vec<Range<u64>>) -> Result<InOrder> {
        for r in &ranges {
            self.check_inside(r)?;
        }
        let groups = ordered_groups(&ranges, self.settings.request_size.max(1) as u64);
        let store = self.store()?;
        let slots = Arc::new(Semaphore::new(self.settings.in_flight.max(1)));
        let (tx, rx) = mpsc::unbounded_channel::<Answers>();
        let file = self.clone();
        let task = runtime()?.spawn(async move {
            let mut gets = tokio::task::JoinSet::new();
            for (range, members) in groups {
                // A slot is freed when the reader has taken every range of a GET.
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (send, receive) = mpsc::unbounded_channel();
                let answers = Answers {
                    members: receive,
                    left: members.len(),
                    _slot: slot,
                };
                if tx.send(answers).is_err() {
                    return; // the reader was dropped
                }
                let (file, store) = (file.clone(), store.clone());
                gets.spawn(async move {
                    if let Err(e) = file.answer_in_order(&store, range, &members, &send).await {
                        let _ = send.send(Err(e));
                    }
                });
                while gets.try_join_next().is_some() {}
            }
            // (Aborting this task, as dropping the reader does, aborts these.)
            while gets.join_next().await.is_some() {}
        });
        Ok(InOrder {
            url: self.url.clone(),
            rx,
            current: None,
            task,
        })
    }

    /// One GET of `range`, its `members` (ascending, disjoint, inside it) sent to `send` each as
    /// soon as its last byte has arrived.
    async fn answer_in_order(
        &self,
        store: &Arc<dyn ObjectStore>,
        range: Range<u64>,
        members: &[Range<u64>],
        send: &mpsc::UnboundedSender<Result<Bytes>>,
    ) -> Result<()> {
        if range.is_empty() {
            for _ in members {
                let _ = send.send(Ok(Bytes::new()));
            }
            return Ok(());
        }
        let mut body = self.get_counted(store, &range).await?.into_stream();
        let len = range.end - range.start;
        // The bytes arrived and not yet handed over, from `taken` (an offset in the range).
        let mut buf = BytesMut::with_capacity(len as usize);
        let mut taken = 0u64;
        for member in members {
            let (from, to) = (member.start - range.start, member.end - range.start);
            while taken + (buf.len() as u64) < to {
                let Some(frame) = body.next().await else {
                    let arrived = taken + buf.len() as u64;
                    return Err(self.range_error(
                        &range,
                        format!("the server answered {arrived} of the {len} bytes asked"),
                    ));
                };
                let frame = frame.map_err(|e| self.request_error(&range, e))?;
                if taken + (buf.len() + frame.len()) as u64 > len {
                    return Err(self.range_error(
                        &range,
                        format!("the server answered more than the {len} bytes asked"),
                    ));
                }
                self.counters.bytes.fetch_add(frame.len() as u64, Relaxed);
                buf.extend_from_slice(&frame);
            }
            buf.advance((from - taken) as usize);
            let bytes = buf.split_to((to - from) as usize).freeze();
            taken = to;
            if send.send(Ok(bytes)).is_err() {
                return Ok(()); // the reader was dropped
            }
        }
        Ok(())
    }
}

/// The ranges of one GET, as the reader takes them.
struct Answers {
    members: mpsc::UnboundedReceiver<Result<Bytes>>,
    /// Ranges not yet taken.
    left: usize,
    /// Held until the reader has taken them all: at most `in_flight` GETs ahead of it.
    _slot: OwnedSemaphorePermit,
}

/// Ranges of a remote object handed back in order ([`RemoteFile::in_order`]).
pub struct InOrder {
    url: String,
    rx: mpsc::UnboundedReceiver<Answers>,
    current: Option<Answers>,
    task: tokio::task::JoinHandle<()>,
}

impl InOrder {
    /// Puts the next range's bytes in `buf` (which then holds exactly them), waiting for them.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::InvalidArgument(
                "a remote file read from inside a tokio runtime: call h5gds from a plain thread"
                    .into(),
            ));
        }
        let failed = |why: &str| Error::RemoteRead {
            url: self.url.clone(),
            offset: 0,
            size: 0,
            why: why.into(),
        };
        loop {
            if let Some(current) = &mut self.current {
                let bytes = match current.members.blocking_recv() {
                    Some(answer) => answer?,
                    None => return Err(failed("the request for these bytes ended unanswered")),
                };
                current.left -= 1;
                if current.left == 0 {
                    self.current = None;
                }
                buf.clear();
                buf.extend_from_slice(&bytes);
                return Ok(());
            }
            match self.rx.blocking_recv() {
                Some(next) => self.current = Some(next),
                None => return Err(failed("more ranges were asked for than were given")),
            }
        }
    }
}

impl Drop for InOrder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_share_a_request_and_large_pieces_are_split() {
        let mut a = vec![0u8; 10];
        let mut b = vec![0u8; 20];
        let mut c = vec![0u8; 25];
        let mut far = vec![0u8; 4];
        // Given out of order: sorted by address; b follows a with a gap of 5 bytes.
        let pieces = vec![
            (1_000_000, far.as_mut_slice()),
            (15, b.as_mut_slice()),
            (0, a.as_mut_slice()),
            (100, c.as_mut_slice()),
        ];
        let g = groups(pieces, 60);
        let ranges: Vec<_> = g.iter().map(|g| g.range.clone()).collect();
        // a and b (0..35), c (100..125) joins them: 125 > 60 bytes, so c starts a request of
        // its own; far is past the gap.
        assert_eq!(ranges, [0..35, 100..125, 1_000_000..1_000_004]);
        let offsets: Vec<_> = g[0].dests.iter().map(|(o, d)| (*o, d.len())).collect();
        assert_eq!(offsets, [(0, 10), (15, 20)]);
        let mut big = vec![0u8; 130];
        let g = groups(vec![(7, big.as_mut_slice())], 60);
        let ranges: Vec<_> = g.iter().map(|g| g.range.clone()).collect();
        assert_eq!(ranges, [7..67, 67..127, 127..137]);
    }

    #[test]
    fn ordered_ranges_coalesce_only_forward_and_within_the_size() {
        let g = ordered_groups(
            &[0..10, 12..20, 5..8, 100_000..100_010, 100_010..100_070],
            64,
        );
        let spans: Vec<_> = g.iter().map(|(r, m)| (r.clone(), m.len())).collect();
        // 5..8 goes back: a request of its own. 100_000.. is past the gap from 8. The last is
        // within the gap but would make 70 > 64 bytes.
        assert_eq!(
            spans,
            [
                (0..20, 2),
                (5..8, 1),
                (100_000..100_010, 1),
                (100_010..100_070, 1)
            ]
        );
    }
}
