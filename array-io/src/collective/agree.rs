//! Agreements: every rank's outcome of a step, all-gathered, so that every rank learns every
//! failure (with its rank and cause) and all ranks take the same branch afterwards. An
//! all-gather of outcomes instead of an all-reduce of flags: the same single collective, and
//! the causes travel with it. Every step of a collective call ends in exactly one agreement,
//! reached by every rank whatever happened before, so no rank waits in a collective another
//! rank skipped.

use crate::error::{Error, Result};
use mpi::datatype::PartitionMut;
use mpi::traits::*;
use mpi::Count;

/// Every rank's `mine`, in rank order.
pub(crate) fn all_gather_bytes<C: Communicator>(comm: &C, mine: &[u8]) -> Vec<Vec<u8>> {
    let size = comm.size() as usize;
    let len = mine.len() as u64;
    let mut lens = vec![0u64; size];
    comm.all_gather_into(&len, &mut lens[..]);
    // Messages are descriptions and error texts: far below MPI's int count limit.
    let counts: Vec<Count> = lens.iter().map(|&l| l as Count).collect();
    let displs: Vec<Count> = counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect();
    let mut all = vec![0u8; lens.iter().sum::<u64>() as usize];
    {
        let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
        comm.all_gather_varcount_into(mine, &mut partition);
    }
    let mut out = Vec::with_capacity(size);
    let mut at = 0;
    for &l in &lens {
        out.push(all[at..at + l as usize].to_vec());
        at += l as usize;
    }
    out
}

/// Agrees on the outcome of `op` (a phrase like "writing the tiles"): this rank's value and
/// every rank's `payload` of its value when every rank succeeded, else on every rank the same
/// [`Error::Collective`] naming each failed rank and its cause.
pub(crate) fn agree_with<C: Communicator, T>(
    comm: &C,
    op: &'static str,
    outcome: Result<T>,
    payload: impl FnOnce(&T) -> Vec<u8>,
) -> Result<(T, Vec<Vec<u8>>)> {
    let mine = match &outcome {
        Ok(value) => [&[0u8][..], &payload(value)].concat(),
        Err(err) => [&[1u8][..], err.to_string().as_bytes()].concat(),
    };
    let all = all_gather_bytes(comm, &mine);
    let failures: Vec<(usize, String)> = all
        .iter()
        .enumerate()
        .filter(|(_, m)| m.first() != Some(&0))
        .map(|(r, m)| {
            (
                r,
                String::from_utf8_lossy(m.get(1..).unwrap_or(&[])).into_owned(),
            )
        })
        .collect();
    match outcome {
        Ok(value) if failures.is_empty() => {
            Ok((value, all.into_iter().map(|m| m[1..].to_vec()).collect()))
        }
        _ => Err(Error::Collective {
            op,
            ranks: all.len(),
            failures,
        }),
    }
}

/// [`agree_with`] without payloads.
pub(crate) fn agree<C: Communicator, T>(
    comm: &C,
    op: &'static str,
    outcome: Result<T>,
) -> Result<T> {
    agree_with(comm, op, outcome, |_| Vec::new()).map(|(value, _)| value)
}

/// A little-endian, length-prefixed encoding of the plain facts the ranks exchange.
#[derive(Default)]
pub(crate) struct Wire {
    bytes: Vec<u8>,
}

impl Wire {
    pub fn u64(mut self, v: u64) -> Wire {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64s(self, v: &[u64]) -> Wire {
        v.iter().fold(self.u64(v.len() as u64), |w, &x| w.u64(x))
    }

    pub fn text(mut self, v: &str) -> Wire {
        self = self.u64(v.len() as u64);
        self.bytes.extend_from_slice(v.as_bytes());
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads what [`Wire`] wrote; a malformed message (another rank running other code) is an
/// error, never a panic.
pub(crate) struct Unwire<'a> {
    bytes: &'a [u8],
}

impl<'a> Unwire<'a> {
    pub fn new(bytes: &'a [u8]) -> Unwire<'a> {
        Unwire { bytes }
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(
                "a malformed message from another rank (is every rank running the \
                        same program?)"
                    .into(),
            );
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u64(&mut self) -> std::result::Result<u64, String> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn u64s(&mut self) -> std::result::Result<Vec<u64>, String> {
        let n = self.u64()?;
        if n > self.bytes.len() as u64 / 8 {
            return Err("a malformed message from another rank".into());
        }
        (0..n).map(|_| self.u64()).collect()
    }

    pub fn text(&mut self) -> std::result::Result<String, String> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| "a malformed message".to_string())?;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trips_and_refuses_truncated_messages() {
        let bytes = Wire::default()
            .u64(7)
            .u64s(&[1, 2, 3])
            .text("rank")
            .finish();
        let mut r = Unwire::new(&bytes);
        assert_eq!(r.u64().unwrap(), 7);
        assert_eq!(r.u64s().unwrap(), [1, 2, 3]);
        assert_eq!(r.text().unwrap(), "rank");
        let mut short = Unwire::new(&bytes[..12]);
        short.u64().unwrap();
        assert!(short.u64s().unwrap_err().contains("malformed"));
    }
}
