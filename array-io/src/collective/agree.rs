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
