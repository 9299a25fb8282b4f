//! Errors inside the driver. Only the trampolines in `plugin.rs` turn them into HDF5 failure codes,
//! an HDF5 error-stack entry and a log line.

use std::io;

pub(crate) type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid value {value:?} for {setting}: accepted values are {accepted}")]
    InvalidSetting {
        setting: String,
        value: String,
        accepted: &'static str,
    },
    #[error("unknown key {key:?} in the gds config string: accepted keys are {accepted}")]
    UnknownConfigKey { key: String, accepted: String },
    #[error("malformed item {item:?} in the gds config string: expected key=value pairs separated by commas")]
    MalformedConfig { item: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("unable to open file {path:?} (flags {flags:#x}): {source}")]
    Open {
        path: String,
        flags: u32,
        source: io::Error,
    },
    #[error("addressed range overflows: addr = {addr}, size = {size}, maxaddr = {maxaddr}")]
    Overflow { addr: u64, size: u64, maxaddr: u64 },
    #[error("{op} failed on {path:?} at offset {offset} ({size} bytes requested, {done} done): {source}")]
    Io {
        op: &'static str,
        path: String,
        offset: u64,
        size: u64,
        done: u64,
        source: io::Error,
    },
    #[error("{op} failed on {path:?}: {source}")]
    File {
        op: &'static str,
        path: String,
        source: io::Error,
    },
    #[error("device I/O: {0}")]
    Device(String),
    #[error("a panic inside the gds driver was caught in {0}")]
    Panic(&'static str),
}

/// Which HDF5 minor error code best describes an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    BadValue,
    CantOpen,
    Read,
    Write,
    Overflow,
    Other,
}

impl Error {
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidSetting { .. }
            | Error::UnknownConfigKey { .. }
            | Error::MalformedConfig { .. }
            | Error::InvalidArgument(_) => ErrorClass::BadValue,
            Error::Open { .. } => ErrorClass::CantOpen,
            Error::Overflow { .. } => ErrorClass::Overflow,
            Error::Io { op, .. } if op.starts_with("read") => ErrorClass::Read,
            Error::Io { .. } => ErrorClass::Write,
            Error::File { .. } | Error::Device(_) | Error::Panic(_) => ErrorClass::Other,
        }
    }
}
