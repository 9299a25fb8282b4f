//! Agreements: every rank's outcome of a step, all-gathered, so that every rank learns every
//! failure (with its rank, kind and cause) and all ranks take the same branch afterwards. An
//! all-gather of outcomes instead of an all-reduce of flags: the same single collective, and the
//! causes travel with it. Every step of a collective call ends in exactly one agreement, reached
//! by every rank whatever happened before, so no rank waits in a collective another rank skipped.

use super::error::{kind_code, kind_of_code, CollectiveError, Failure};
use super::wire::{Unwire, Wire};

/// The least a collective call needs of a communicator: each face implements it over its MPI
/// binding (array-io over rsmpi, the Python extension over an mpi4py communicator).
pub trait Communicator {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Every rank's `mine`, in rank order; collective (every rank calls it). An error is the
    /// communicator's own, in words.
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, String>;
}

const SUCCEEDED: u8 = 0;
const FAILED: u8 = 1;

fn failure_of(message: &[u8]) -> Result<Failure, String> {
    let mut r = Unwire::new(message);
    let (kind, errno, text) = (r.u64()?, r.u64()?, r.text()?);
    let kind = kind_of_code(kind).ok_or("a malformed message from another rank")?;
    let errno = (errno != 0).then(|| (errno - 1) as i32);
    Ok(Failure {
        kind,
        errno,
        message: text,
    })
}

/// Agrees on the outcome of `op`: this rank's value and every rank's `payload` of its value (in
/// rank order) when every rank succeeded, else on every rank the same
/// [`CollectiveError::Failed`] naming each failed rank and its failure.
pub(crate) fn agree_with<C: Communicator + ?Sized, T>(
    comm: &C,
    op: &str,
    outcome: crate::Result<T>,
    payload: impl FnOnce(&T) -> Vec<u8>,
) -> Result<(T, Vec<Vec<u8>>), CollectiveError> {
    let mine = match &outcome {
        Ok(value) => [&[SUCCEEDED][..], &payload(value)].concat(),
        Err(e) => {
            let f = Failure::from(e);
            let errno = f.errno.map_or(0, |e| e as u64 + 1);
            let wire = Wire::default().u64(kind_code(f.kind)).u64(errno);
            [&[FAILED][..], &wire.text(&f.message).finish()].concat()
        }
    };
    let all = comm.all_gather(&mine).map_err(CollectiveError::Exchange)?;
    let mut failures = Vec::new();
    for (rank, message) in all.iter().enumerate() {
        match message.split_first() {
            Some((&SUCCEEDED, _)) => {}
            Some((&FAILED, rest)) => {
                failures.push((rank, failure_of(rest).map_err(CollectiveError::Exchange)?))
            }
            _ => {
                return Err(CollectiveError::Exchange(format!(
                    "rank {rank} sent no outcome"
                )))
            }
        }
    }
    match outcome {
        Ok(value) if failures.is_empty() => {
            Ok((value, all.into_iter().map(|m| m[1..].to_vec()).collect()))
        }
        _ => Err(CollectiveError::Failed {
            op: op.to_string(),
            ranks: all.len(),
            failures,
        }),
    }
}

/// Agrees on the outcome of `op`: this rank's value where every rank succeeded, else on every
/// rank the same error naming each failed rank and its failure, of the kind they share.
pub fn agree<C: Communicator + ?Sized, T>(
    comm: &C,
    op: &str,
    outcome: crate::Result<T>,
) -> crate::Result<T> {
    agree_inner(comm, op, outcome).map_err(crate::Error::from)
}

/// [`agree_with`] without payloads.
pub(crate) fn agree_inner<C: Communicator + ?Sized, T>(
    comm: &C,
    op: &str,
    outcome: crate::Result<T>,
) -> Result<T, CollectiveError> {
    agree_with(comm, op, outcome, |_| Vec::new()).map(|(value, _)| value)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Ranks in one process: `all_gather` returns the messages set for the other ranks around
    /// this rank's own (a test of what every rank decides from the same exchange).
    pub(crate) struct Ranks {
        pub rank: usize,
        pub others: RefCell<Vec<Vec<Vec<u8>>>>,
    }

    impl Communicator for Ranks {
        fn rank(&self) -> usize {
            self.rank
        }
        fn size(&self) -> usize {
            self.others.borrow().first().map_or(1, |o| o.len() + 1)
        }
        fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, String> {
            let mut all = self.others.borrow_mut().remove(0);
            all.insert(self.rank, mine.to_vec());
            Ok(all)
        }
    }

    /// What rank `rank` would send for `outcome`.
    pub(crate) fn sent(outcome: crate::Result<Vec<u8>>) -> Vec<u8> {
        let wire = RefCell::new(Vec::new());
        struct Capture<'a>(&'a RefCell<Vec<u8>>);
        impl Communicator for Capture<'_> {
            fn rank(&self) -> usize {
                0
            }
            fn size(&self) -> usize {
                1
            }
            fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, String> {
                *self.0.borrow_mut() = mine.to_vec();
                Ok(vec![mine.to_vec()])
            }
        }
        let _ = agree_with(&Capture(&wire), "", outcome, |p| p.clone());
        wire.into_inner()
    }

    #[test]
    fn every_rank_learns_each_failure_with_its_kind_and_errno() {
        let disk = crate::Error::new(crate::ErrorKind::Io, "disk full").with_errno(Some(28));
        let others = vec![vec![sent(Ok(b"x".to_vec())), sent(Err(disk.clone()))]];
        let comm = Ranks {
            rank: 0,
            others: RefCell::new(others),
        };
        let err = agree_with(&comm, "writing the tiles", Ok(()), |_| b"y".to_vec()).unwrap_err();
        let CollectiveError::Failed {
            ranks, failures, ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(
            (*ranks, failures.clone()),
            (3, vec![(2, Failure::from(&disk))])
        );
        assert_eq!(failures[0].1.errno, Some(28));
        let comm = Ranks {
            rank: 1,
            others: RefCell::new(vec![vec![sent(Ok(b"a".to_vec()))]]),
        };
        let (_, payloads) = agree_with(&comm, "op", Ok(()), |_| b"b".to_vec()).unwrap();
        assert_eq!(payloads, [b"a".to_vec(), b"b".to_vec()]);
        let comm = Ranks {
            rank: 0,
            others: RefCell::new(vec![vec![b"\x01\x09".to_vec()]]),
        };
        let err = agree(&comm, "op", Ok(())).unwrap_err();
        let exchange = matches!(err.facts().collective, Some(CollectiveError::Exchange(_)));
        assert!(
            exchange && err.kind() == crate::ErrorKind::Collective,
            "{err:?}"
        );
    }
}
