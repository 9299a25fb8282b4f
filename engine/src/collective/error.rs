//! The one error of a collective call, for both faces: a step that failed on some ranks (each
//! rank's failure with its kind, travelling in the agreement), tiles that do not form one array,
//! a rank writing something else than rank 0, or a failed exchange. One `Display`; each face maps
//! only the [`Kind`] to its own error type (array-io's `Error`, a Python exception class).

use crate::tiles::TilesError;

/// What kind of failure a rank had, as both faces tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value the call was given was refused (a shape, a name, a path, a setting).
    Argument,
    /// An element type that cannot be stored or converted.
    Type,
    /// The file system or the storage failed (with the OS's error number where there is one).
    Io,
    /// Anything else: HDF5, CUDA, the exchange between the ranks.
    Failed,
}

impl Kind {
    pub(crate) fn from_code(code: u64) -> Option<Kind> {
        [Kind::Argument, Kind::Type, Kind::Io, Kind::Failed]
            .into_iter()
            .find(|&k| k as u64 == code)
    }
}

/// One rank's failed step: its kind, the OS's error number where it gave one, and the message
/// (what failed and what to do), as the face that failed words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: Kind,
    pub errno: Option<i32>,
    pub message: String,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Failure {
        let message = message.into();
        Failure {
            kind,
            errno: None,
            message,
        }
    }

    /// A failed file-system call, with its error number.
    pub fn io(error: &std::io::Error, message: impl Into<String>) -> Failure {
        let errno = error.raw_os_error();
        Failure {
            errno,
            ..Failure::new(Kind::Io, message)
        }
    }
}

impl From<h5gds_runtime::cuda::CudaError> for Failure {
    fn from(e: h5gds_runtime::cuda::CudaError) -> Failure {
        Failure::new(Kind::Failed, format!("CUDA: {}: {}", e.call(), e.detail()))
    }
}

/// The fields ranks must agree on, in the order they are compared; shown as what a rank does
/// with it ("rank 1 writes the file ...").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    File,
    Dataset,
    Element,
    Decomposition,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::File => "writes the file",
            Field::Dataset => "writes the dataset",
            Field::Element => "has a tile of",
            Field::Decomposition => "splits the array into",
        })
    }
}

/// Why a collective call failed; every rank returns the same.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    /// The step `op` (a phrase like "writing the tiles") failed on the ranks listed, in rank
    /// order, each with its failure, out of `ranks`.
    #[error("{}", failed(.op, .ranks, .failures))]
    Failed {
        op: String,
        ranks: usize,
        failures: Vec<(usize, Failure)>,
    },
    /// The ranks' tiles do not form one array, or a box lies outside the dataset.
    #[error("invalid decomposition: {0}")]
    Tiles(#[from] TilesError),
    /// Rank `rank` writes another `field` (`theirs`) than rank 0 (`first`).
    #[error("invalid decomposition: rank {rank} {field} {theirs}, rank 0 {first}")]
    Disagreement {
        rank: usize,
        field: Field,
        theirs: String,
        first: String,
    },
    /// The exchange between the ranks failed (the communicator's error, or a malformed message).
    #[error("the exchange between the ranks failed: {0} (is every rank making the same call?)")]
    Exchange(String),
}

fn failed(op: &str, ranks: &usize, failures: &[(usize, Failure)]) -> String {
    let same = failures
        .iter()
        .all(|(_, f)| f.message == failures[0].1.message);
    if failures.len() == *ranks && *ranks > 1 && same {
        return format!(
            "{op} failed on every rank ({ranks}): {}",
            failures[0].1.message
        );
    }
    let which: Vec<String> = failures.iter().map(|(r, _)| r.to_string()).collect();
    let causes: Vec<String> = failures
        .iter()
        .map(|(r, f)| format!("rank {r}: {}", f.message))
        .collect();
    let s = if failures.len() == 1 { "" } else { "s" };
    let (which, causes) = (which.join(", "), causes.join("; "));
    format!("{op} failed on rank{s} {which} of {ranks}: {causes}")
}

impl CollectiveError {
    /// The kind every failed rank shares (`None` where they differ).
    pub fn kind(&self) -> Option<Kind> {
        match self {
            CollectiveError::Failed { failures, .. } => {
                let first = failures.first()?.1.kind;
                failures
                    .iter()
                    .all(|(_, f)| f.kind == first)
                    .then_some(first)
            }
            CollectiveError::Exchange(_) => Some(Kind::Failed),
            _ => Some(Kind::Argument),
        }
    }

    /// The OS's error number every failed rank shares, if any.
    pub fn errno(&self) -> Option<i32> {
        let CollectiveError::Failed { failures, .. } = self else {
            return None;
        };
        let first = failures.first()?.1.errno?;
        let all = failures.iter().all(|(_, f)| f.errno == Some(first));
        all.then_some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(failures: Vec<(usize, Failure)>, ranks: usize) -> CollectiveError {
        let op = "writing the tiles".into();
        CollectiveError::Failed {
            op,
            ranks,
            failures,
        }
    }

    #[test]
    fn a_failure_names_each_failed_rank_and_its_cause_and_the_kind_they_share() {
        let full = Failure {
            errno: Some(28),
            ..Failure::new(Kind::Io, "No space left on device")
        };
        let e = failed(vec![(3, full.clone())], 4);
        assert_eq!(
            e.to_string(),
            "writing the tiles failed on rank 3 of 4: rank 3: No space left on device"
        );
        assert_eq!((e.kind(), e.errno()), (Some(Kind::Io), Some(28)));
        let e = failed(vec![(0, full.clone()), (1, full.clone())], 2);
        assert_eq!(
            e.to_string(),
            "writing the tiles failed on every rank (2): No space left on device"
        );
        let other = Failure::new(Kind::Argument, "a bad tile");
        let e = failed(vec![(0, full), (2, other)], 3);
        assert!(e
            .to_string()
            .starts_with("writing the tiles failed on ranks 0, 2 of 3: "));
        assert_eq!((e.kind(), e.errno()), (None, None));
        for code in 0..4 {
            assert_eq!(Kind::from_code(code).map(|k| k as u64), Some(code));
        }
        assert_eq!(Kind::from_code(4), None);
    }
}
