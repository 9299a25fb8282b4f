//! The one error type of array-io. Every message names what was wrong: the file, the dataset,
//! the setting or the types involved, so that a failure deep inside a pipeline can be acted on
//! without a debugger.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Everything that can go wrong in array-io.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `to_file` or `from_file` was given a directory where a file belongs.
    #[error("{} is a directory, not an HDF5 file", path.display())]
    PathIsDirectory { path: PathBuf },

    /// The file to read does not exist.
    #[error("no such file: {}", path.display())]
    FileNotFound { path: PathBuf },

    /// A dataset name that is empty, relative or otherwise not a dataset path.
    #[error("invalid dataset name {dataset:?}: {reason}")]
    InvalidDatasetName {
        dataset: String,
        reason: &'static str,
    },

    /// The dataset does not exist; `existing` lists the datasets the file does hold.
    #[error("{}: no dataset {dataset:?}; the file holds {}", path.display(), list(existing))]
    NoSuchDataset {
        path: PathBuf,
        dataset: String,
        existing: Vec<String>,
    },

    /// The name exists but is a group (or a named datatype), not a dataset.
    #[error("{}: {dataset:?} is a {kind}, not a dataset", path.display())]
    NotADataset {
        path: PathBuf,
        dataset: String,
        kind: &'static str,
    },

    /// An element type array-io (or HDF5) cannot store.
    #[error("element type {type_name} cannot be stored in HDF5: {reason}")]
    UnsupportedType {
        type_name: &'static str,
        reason: &'static str,
    },

    /// The dataset's stored type differs from the requested one and conversion was not asked for.
    #[error(
        "{}: dataset {dataset:?} holds {stored}, not {requested}; read it as {stored}, or allow \
         conversion (ReadOptions::allow_conversion)",
        path.display()
    )]
    TypeMismatch {
        path: PathBuf,
        dataset: String,
        stored: String,
        requested: &'static str,
    },

    /// Conversion was asked for, but HDF5 has no conversion between the two types.
    #[error("{}: dataset {dataset:?} holds {stored}, which HDF5 cannot convert to {requested}", path.display())]
    NoConversion {
        path: PathBuf,
        dataset: String,
        stored: String,
        requested: &'static str,
    },

    /// A bool dataset holding a byte other than 0 or 1.
    #[error(
        "{}: dataset {dataset:?} holds the value {value} at element {index}, which is not a \
         bool (FALSE = 0, TRUE = 1)",
        path.display()
    )]
    InvalidBool {
        path: PathBuf,
        dataset: String,
        index: usize,
        value: u8,
    },

    /// A dataspace array-io does not read (a null dataspace, for instance).
    #[error("{}: dataset {dataset:?} {reason}", path.display())]
    UnsupportedDataset {
        path: PathBuf,
        dataset: String,
        reason: String,
    },

    /// `from_file_rows` was given a row index outside the dataset.
    #[error(
        "{}: dataset {dataset:?}: index {index} is out of range for axis 0 with size {rows}",
        path.display()
    )]
    RowOutOfRange {
        path: PathBuf,
        dataset: String,
        index: i64,
        rows: u64,
    },

    /// `from_file_batched` was given an unusable chunk shape.
    #[error(
        "invalid chunk_shape {chunk_shape:?} for dataset {dataset:?} of shape {shape:?}: {reason}"
    )]
    InvalidChunkShape {
        dataset: String,
        chunk_shape: Vec<usize>,
        shape: Vec<usize>,
        reason: String,
    },

    /// A shape that does not match the data it describes.
    #[error("shape {shape:?} holds {expected} elements, but the data has {actual}")]
    ShapeMismatch {
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },

    /// An environment variable with a value array-io does not accept.
    #[error("invalid {variable}={value:?}: accepted values are {accepted}")]
    InvalidSetting {
        variable: &'static str,
        value: String,
        accepted: &'static str,
    },

    /// A file-system operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An HDF5 call failed; `message` is HDF5's own account of why.
    #[error("{}: {op}{}: {message}", path.display(), for_dataset(dataset))]
    Hdf5 {
        op: String,
        path: PathBuf,
        dataset: Option<String>,
        message: String,
    },

    /// A collective call (feature `mpi`) failed: on one or more ranks (naming each failed rank
    /// and its cause: `failed_ranks()`; its kind the one they share), or the ranks' tiles do not
    /// form one array, or a tile lies outside the dataset. Every rank returns the same error.
    #[error(transparent)]
    Collective(h5gds_engine::Error),

    /// A stored chunk of a compressed dataset that does not decode: corrupt, cut short, or not
    /// in the format its filter writes. `chunk` is the chunk's first element.
    #[error("{}: dataset {dataset:?}, chunk at {chunk:?}: {reason}", path.display())]
    ChunkDecode {
        path: PathBuf,
        dataset: String,
        chunk: Vec<u64>,
        reason: String,
    },

    /// The engine refused or failed (a compressed write, a read's selection): its error names
    /// the dataset, the chunk where one is at fault, and its kind (`source.kind()`).
    #[error("{}: {source}", path.display())]
    Engine {
        path: PathBuf,
        #[source]
        source: h5gds_engine::Error,
    },

    /// A CUDA call failed (or CUDA is not usable in this process).
    #[error("CUDA: {op}: {message}")]
    Cuda { op: String, message: String },
}

/// The result type of array-io.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn list(names: &[String]) -> String {
    if names.is_empty() {
        return "no datasets".into();
    }
    const SHOWN: usize = 20;
    let mut text = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

fn for_dataset(dataset: &Option<String>) -> String {
    match dataset {
        Some(name) => format!(" (dataset {name:?})"),
        None => String::new(),
    }
}

impl Error {
    /// An HDF5 failure of `op` on `path` (and `dataset`), with HDF5's message.
    pub(crate) fn hdf5(
        op: impl Into<String>,
        path: &Path,
        dataset: Option<&str>,
        err: impl std::fmt::Display,
    ) -> Error {
        Error::Hdf5 {
            op: op.into(),
            path: path.to_path_buf(),
            dataset: dataset.map(str::to_string),
            message: err.to_string(),
        }
    }

    /// The engine's error as array-io's, about `dataset` of `path`: its kind mapped, the variant
    /// that names its facts where one does (a setting, a damaged chunk, a bool, a collective
    /// call), else [`Error::Engine`].
    pub(crate) fn engine<'a>(
        path: &'a Path,
        dataset: &'a str,
    ) -> impl Fn(h5gds_engine::Error) -> Error + 'a {
        use h5gds_engine::ErrorKind;
        move |e| {
            let (path, facts) = (path.to_path_buf(), e.facts());
            let dataset = facts.dataset.clone().unwrap_or_else(|| dataset.to_string());
            match (e.kind(), facts) {
                (_, f) if f.setting.is_some() => f.setting.clone().map(Error::from).unwrap(),
                (_, f) if f.collective.is_some() => Error::Collective(e.clone()),
                (ErrorKind::Damaged, f) if f.chunk.is_some() => Error::ChunkDecode {
                    path,
                    dataset,
                    chunk: f.chunk.clone().unwrap_or_default(),
                    reason: f.detail.clone(),
                },
                (_, f) if f.not_bool.is_some() => {
                    let (index, value) = f.not_bool.unwrap_or_default();
                    Error::InvalidBool {
                        path,
                        dataset,
                        index: index as usize,
                        value,
                    }
                }
                (ErrorKind::Io, f) => Error::Io {
                    op: "reading",
                    path,
                    source: std::io::Error::other(f.detail.clone()),
                },
                _ => Error::Engine { path, source: e },
            }
        }
    }

    /// A failed CUDA operation.
    pub(crate) fn cuda(op: impl Into<String>, err: impl std::fmt::Display) -> Error {
        Error::Cuda {
            op: op.into(),
            message: err.to_string(),
        }
    }
}

impl From<h5gds_runtime::cuda::CudaError> for Error {
    fn from(err: h5gds_runtime::cuda::CudaError) -> Error {
        Error::cuda(err.call(), err.detail())
    }
}

impl Error {
    #[cfg(feature = "mpi")]
    /// This error as the engine's, for one rank's failure in a collective step: its kind, and the
    /// OS's error number where there is one.
    pub(crate) fn to_engine(&self) -> h5gds_engine::Error {
        use h5gds_engine::{Error as EngineError, ErrorKind as Kind};
        let kind = match self {
            Error::Collective(source) => return source.clone(),
            Error::Engine { source, .. } => source.kind(),
            Error::Io { .. } | Error::FileNotFound { .. } => Kind::Io,
            Error::UnsupportedType { .. }
            | Error::TypeMismatch { .. }
            | Error::NoConversion { .. } => Kind::Unsupported,
            Error::InvalidSetting { .. } => Kind::InvalidSetting,
            Error::PathIsDirectory { .. }
            | Error::InvalidDatasetName { .. }
            | Error::NoSuchDataset { .. }
            | Error::NotADataset { .. }
            | Error::UnsupportedDataset { .. }
            | Error::RowOutOfRange { .. }
            | Error::InvalidChunkShape { .. }
            | Error::ShapeMismatch { .. }
            | Error::InvalidBool { .. } => Kind::InvalidArgument,
            Error::Hdf5 { .. } => Kind::Hdf5,
            Error::ChunkDecode { .. } => Kind::Damaged,
            Error::Cuda { .. } => Kind::Device,
        };
        let errno = match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Engine { source, .. } => source.facts().errno,
            _ => None,
        };
        EngineError::new(kind, self.to_string()).with_errno(errno)
    }
}

impl From<h5gds_runtime::settings::InvalidSetting> for Error {
    fn from(invalid: h5gds_runtime::settings::InvalidSetting) -> Error {
        Error::InvalidSetting {
            variable: invalid.variable,
            value: invalid.value,
            accepted: invalid.accepted,
        }
    }
}

/// Runs a device operation, turning any panic that escapes it (cudarc panics when a CUDA
/// symbol is missing, also inside its destructors) into an error.
pub(crate) fn no_panic<T>(op: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let detail = h5gds_runtime::cuda::panic_text(payload.as_ref())
                .unwrap_or_else(|| "panicked".into());
            Err(Error::cuda(op, detail))
        }
    }
}
