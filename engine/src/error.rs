//! The one error of the engine, for both faces: a [`Kind`] (what each face maps to its own error
//! type or Python exception) and the facts it names (file, dataset, chunk, rank, setting, shape,
//! HDF5's error stack), with one `Display` that says what failed and what to do. Every mechanism's
//! failure folds into it (`From`), so a face converts one type, by its kind alone.

use crate::collective::CollectiveError;
use crate::staged::NotBool;
use crate::stored::StoredError;
use crate::tiles::TilesError;
use h5gds_gpu_codec::DeviceFailure;
use h5gds_runtime::cuda::CudaError;
use h5gds_runtime::hdf5::{Hdf5Error, MissingSymbol};
use h5gds_runtime::settings::InvalidSetting;
use std::fmt;

/// What kind of failure: the one thing a face looks at to choose its own error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An `H5GDS_*` setting holds a value h5gds does not accept ([`Facts::setting`]).
    InvalidSetting,
    /// The caller's request does not fit the dataset: its selection, buffer, shape or chunks, or
    /// its element type (a bool read of a byte that is not 0 or 1).
    InvalidArgument,
    /// h5gds cannot do this with this dataset (its filters, its type, its layout).
    Unsupported,
    /// The stored bytes are wrong: a chunk that does not decode.
    Damaged,
    /// h5gds could not encode a chunk through the dataset's filters.
    Encoding,
    /// HDF5 refused or failed (its error stack in [`Facts::hdf5`]).
    Hdf5,
    /// CUDA or nvCOMP failed.
    Device,
    /// The file system or the storage failed.
    Io,
    /// A collective call failed on some ranks, or the ranks' tiles do not agree
    /// ([`Facts::collective`]).
    Collective,
}

/// The facts an [`Error`] names, each where it is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub kind: Kind,
    /// What failed, in words (without the facts below, which `Display` puts in front).
    pub detail: String,
    pub file: Option<String>,
    pub dataset: Option<String>,
    /// The failed chunk's first element.
    pub chunk: Option<Vec<u64>>,
    pub rank: Option<usize>,
    /// The OS's error number, where the failure is one of a file-system call.
    pub errno: Option<i32>,
    pub setting: Option<InvalidSetting>,
    pub shape: Option<Vec<u64>>,
    /// A bool byte that is not 0 or 1: its element (of the selection) and value.
    pub not_bool: Option<(u64, u8)>,
    /// HDF5's failed call and error stack.
    pub hdf5: Option<Hdf5Error>,
    /// The whole account of a failed collective call (each failed rank and its failure).
    pub collective: Option<CollectiveError>,
}

/// The engine's error: a [`Kind`] and its [`Facts`], boxed so that results stay small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(Box<Facts>);

/// The engine's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failure of `kind`, said by `detail`.
    pub fn new(kind: Kind, detail: impl Into<String>) -> Error {
        Error(Box::new(Facts {
            kind,
            detail: detail.into(),
            file: None,
            dataset: None,
            chunk: None,
            rank: None,
            errno: None,
            setting: None,
            shape: None,
            not_bool: None,
            hdf5: None,
            collective: None,
        }))
    }

    /// The caller's request does not fit.
    pub fn invalid(detail: impl Into<String>) -> Error {
        Error::new(Kind::InvalidArgument, detail)
    }

    /// HDF5 failed, as `detail` (its error stack included) says.
    pub fn hdf5(detail: impl Into<String>) -> Error {
        Error::new(Kind::Hdf5, detail)
    }

    pub fn kind(&self) -> Kind {
        self.0.kind
    }

    pub fn facts(&self) -> &Facts {
        &self.0
    }

    /// The same error, naming the file (where it does not yet).
    pub fn in_file(mut self, file: impl fmt::Display) -> Error {
        self.0.file.get_or_insert_with(|| file.to_string());
        self
    }

    /// The same error, naming the dataset (where it does not yet).
    pub fn in_dataset(mut self, dataset: &str) -> Error {
        self.0.dataset.get_or_insert_with(|| dataset.to_string());
        self
    }

    /// The same error about the chunk whose first element is `offset`.
    pub fn at_chunk(mut self, offset: &[u64]) -> Error {
        self.0.chunk = Some(offset.to_vec());
        self
    }

    /// The same error, naming the shape involved.
    pub fn with_shape(mut self, shape: &[u64]) -> Error {
        self.0.shape = Some(shape.to_vec());
        self
    }

    /// The same error, as rank `rank`'s.
    pub fn on_rank(mut self, rank: usize) -> Error {
        self.0.rank = Some(rank);
        self
    }

    /// The same error with the OS's error number `errno` (where there is one).
    pub fn with_errno(mut self, errno: Option<i32>) -> Error {
        self.0.errno = errno.or(self.0.errno);
        self
    }

    /// The facts, for the engine's own modules to fill in.
    pub(crate) fn facts_mut(&mut self) -> &mut Facts {
        &mut self.0
    }

    /// Refuses the first byte of `bytes`, a bool read of `dataset`, that is not 0 or 1 (which a
    /// bool cannot hold), naming its element of the selection and its value.
    pub fn check_bools(bytes: &[u8], dataset: &str) -> Result<()> {
        crate::staged::check_bools(bytes, 0).map_err(|n| Error::from(n).in_dataset(dataset))
    }

    /// The same error with `before` in front of its detail (the step that failed).
    pub fn during(mut self, before: impl fmt::Display) -> Error {
        self.0.detail = format!("{before}: {}", self.0.detail);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let facts = &self.0;
        if let Some(file) = &facts.file {
            write!(f, "{file}: ")?;
        }
        if let Some(rank) = facts.rank {
            write!(f, "rank {rank}: ")?;
        }
        if let Some(dataset) = &facts.dataset {
            write!(f, "dataset {dataset}: ")?;
        }
        if let Some(chunk) = &facts.chunk {
            write!(f, "the chunk at {chunk:?} ")?;
        }
        f.write_str(&facts.detail)?;
        // What to do, where the detail does not say it already.
        let hint = match facts.kind {
            Kind::Damaged if facts.chunk.is_some() => {
                "; the stored chunk is damaged: rewrite the dataset from a good copy"
            }
            Kind::Device if !facts.detail.contains("H5GDS_LOG") => " (H5GDS_LOG=debug says more)",
            _ => "",
        };
        f.write_str(hint)
    }
}

impl std::error::Error for Error {}

impl From<InvalidSetting> for Error {
    fn from(invalid: InvalidSetting) -> Error {
        let mut e = Error::new(Kind::InvalidSetting, invalid.to_string());
        e.0.setting = Some(invalid);
        e
    }
}

impl From<Hdf5Error> for Error {
    fn from(failed: Hdf5Error) -> Error {
        let mut e = Error::hdf5(failed.to_string());
        e.0.hdf5 = Some(failed);
        e
    }
}

impl From<MissingSymbol> for Error {
    fn from(missing: MissingSymbol) -> Error {
        Hdf5Error::from(missing).into()
    }
}

impl From<CudaError> for Error {
    fn from(failed: CudaError) -> Error {
        Error::new(
            Kind::Device,
            format!("CUDA: {}: {}", failed.call(), failed.detail()),
        )
    }
}

impl From<DeviceFailure> for Error {
    fn from(failed: DeviceFailure) -> Error {
        Error::new(Kind::Device, failed.to_string())
    }
}

impl From<NotBool> for Error {
    fn from(n: NotBool) -> Error {
        let (element, value) = (n.element, n.value);
        let mut e = Error::invalid(format!(
            "holds the byte {value} at element {element} of the selection, which is not a \
                 bool (FALSE = 0, TRUE = 1); read it as uint8"
        ));
        e.0.not_bool = Some((element, value));
        e
    }
}

impl From<StoredError> for Error {
    fn from(failed: StoredError) -> Error {
        match failed {
            StoredError::Invalid(detail) => Error::invalid(detail),
            StoredError::Failed(detail) => Error::new(Kind::Io, detail),
            StoredError::Corrupt {
                dataset,
                chunk,
                reason,
            } => Error::new(Kind::Damaged, format!("cannot be decoded: {reason}"))
                .in_dataset(&dataset)
                .at_chunk(&chunk),
        }
    }
}

impl From<CollectiveError> for Error {
    /// Of the kind every failed rank shares (else [`Kind::Collective`]), with their error number.
    fn from(failed: CollectiveError) -> Error {
        let kind = failed.kind().unwrap_or(Kind::Collective);
        let mut e = Error::new(kind, failed.to_string()).with_errno(failed.errno());
        e.0.collective = Some(failed);
        e
    }
}

impl From<TilesError> for Error {
    fn from(invalid: TilesError) -> Error {
        Error::invalid(format!("invalid decomposition: {invalid}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_facts_then_what_failed() {
        let e = Error::new(Kind::Damaged, "cannot be decoded: cut short")
            .in_dataset("/x")
            .at_chunk(&[32])
            .in_file("f.h5");
        assert_eq!(e.kind(), Kind::Damaged);
        assert_eq!(e.facts().chunk.as_deref(), Some(&[32][..]));
        assert_eq!(
            e.to_string(),
            "f.h5: dataset /x: the chunk at [32] cannot be decoded: cut short; the stored chunk \
             is damaged: rewrite the dataset from a good copy"
        );
    }

    #[test]
    fn a_setting_keeps_its_variable_and_accepted_values() {
        let invalid = InvalidSetting {
            variable: "H5GDS_NTHREADS",
            value: "abc".into(),
            accepted: "a count",
        };
        let e = Error::from(invalid.clone());
        assert_eq!(e.kind(), Kind::InvalidSetting);
        assert_eq!(e.facts().setting.as_ref(), Some(&invalid));
        assert_eq!(e.to_string(), invalid.to_string());
    }

    #[test]
    fn a_bool_byte_names_element_and_value() {
        let e = Error::from(NotBool {
            element: 3,
            value: 7,
        })
        .in_dataset("/b");
        assert_eq!(e.facts().not_bool, Some((3, 7)));
        assert!(e
            .to_string()
            .starts_with("dataset /b: holds the byte 7 at element 3"));
    }
}
