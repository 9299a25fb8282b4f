//! The one error of a collective call, for both faces: a step that failed on some ranks (each
//! rank's failure with its kind, travelling in the agreement), tiles that do not form one array,
//! a rank writing something else than rank 0, or a failed exchange. One `Display`; it reaches the
//! faces as the engine's [`Error`], of the kind the failed ranks share, which each face maps.

use crate::tiles::TilesError;
use crate::{Error, ErrorKind};

/// Every kind of the engine's error, in the order of its code on the wire.
const KINDS: [ErrorKind; 9] = [
    ErrorKind::InvalidSetting,
    ErrorKind::InvalidArgument,
    ErrorKind::Unsupported,
    ErrorKind::Damaged,
    ErrorKind::Encoding,
    ErrorKind::Hdf5,
    ErrorKind::Device,
    ErrorKind::Io,
    ErrorKind::Collective,
];

/// The code of `kind` on the wire.
pub(crate) fn kind_code(kind: ErrorKind) -> u64 {
    KINDS.iter().position(|&k| k == kind).unwrap_or(0) as u64
}

/// The kind of wire code `code`.
pub(crate) fn kind_of_code(code: u64) -> Option<ErrorKind> {
    KINDS.get(usize::try_from(code).ok()?).copied()
}

/// One rank's failed step as it travels to the others: the kind of its error, the OS's error
/// number where it gave one, and its message (what failed and what to do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: ErrorKind,
    pub errno: Option<i32>,
    pub message: String,
}

impl From<&Error> for Failure {
    fn from(e: &Error) -> Failure {
        Failure {
            kind: e.kind(),
            errno: e.facts().errno,
            message: e.to_string(),
        }
    }
}

impl Error {
    /// Each rank that failed in a collective call, with its message, in rank order (none for
    /// an error that is not a collective call's).
    pub fn failed_ranks(&self) -> Vec<(usize, &str)> {
        match &self.facts().collective {
            Some(CollectiveError::Failed { failures, .. }) => failures
                .iter()
                .map(|(rank, f)| (*rank, f.message.as_str()))
                .collect(),
            _ => Vec::new(),
        }
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
    /// The kind every failed rank shares (`None` where they differ, or the exchange failed).
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            CollectiveError::Failed { failures, .. } => {
                let first = failures.first()?.1.kind;
                failures
                    .iter()
                    .all(|(_, f)| f.kind == first)
                    .then_some(first)
            }
            CollectiveError::Exchange(_) => None,
            _ => Some(ErrorKind::InvalidArgument),
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
            kind: ErrorKind::Io,
            errno: Some(28),
            message: "No space left on device".into(),
        };
        let e = failed(vec![(3, full.clone())], 4);
        assert_eq!(
            e.to_string(),
            "writing the tiles failed on rank 3 of 4: rank 3: No space left on device"
        );
        assert_eq!((e.kind(), e.errno()), (Some(ErrorKind::Io), Some(28)));
        let engine = Error::from(e.clone());
        assert_eq!(
            (engine.kind(), engine.facts().errno),
            (ErrorKind::Io, Some(28))
        );
        assert_eq!(engine.failed_ranks(), [(3, "No space left on device")]);
        let e = failed(vec![(0, full.clone()), (1, full.clone())], 2);
        assert_eq!(
            e.to_string(),
            "writing the tiles failed on every rank (2): No space left on device"
        );
        let other = Failure::from(&Error::invalid("a bad tile"));
        let e = failed(vec![(0, full), (2, other)], 3);
        assert!(e
            .to_string()
            .starts_with("writing the tiles failed on ranks 0, 2 of 3: "));
        assert_eq!((e.kind(), e.errno()), (None, None));
        assert_eq!(Error::from(e).kind(), ErrorKind::Collective);
        for code in 0..9 {
            assert_eq!(kind_of_code(code).map(kind_code), Some(code));
        }
        assert_eq!(kind_of_code(9), None);
    }
}
