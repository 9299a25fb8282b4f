//! Errors inside the driver. Only the trampolines in `plugin.rs` turn them into HDF5 failure codes,
//! an HDF5 error-stack entry and a log line.

use std::io;

pub(crate) type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid value {value} for {setting}: accepted values are {accepted}")]
    InvalidSetting {
        setting: String,
        value: String,
        accepted: &'static str,
    },
    #[error("unknown key {key} in the gds config string: accepted keys are {accepted}")]
    UnknownConfigKey { key: String, accepted: String },
    #[error("malformed item {item} in the gds config string: expected key=value pairs separated by commas")]
    MalformedConfig { item: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error(
        "unable to open file: name = '{path}', {}, flags = {flags:x}",
        OsError(source)
    )]
    Open {
        path: String,
        flags: u32,
        source: io::Error,
    },
    #[error("direct_io=on but the file system refuses O_DIRECT for '{path}' ({}); use direct_io=auto or off", OsError(source))]
    DirectIoRefused { path: String, source: io::Error },
    #[error("addressed range overflows: addr = {addr}, size = {size}, maxaddr = {maxaddr}")]
    Overflow { addr: u64, size: u64, maxaddr: u64 },
    #[error(
        "{op} failed on '{path}' at offset {offset} ({size} bytes requested, {done} done): {}",
        OsError(source)
    )]
    Io {
        op: &'static str,
        path: String,
        offset: u64,
        size: u64,
        done: u64,
        source: io::Error,
    },
    #[error("{op} failed on '{path}': {}", OsError(source))]
    File {
        op: &'static str,
        path: String,
        source: io::Error,
    },
    /// A remote file (URL) that cannot be opened: `errno` says as a local file's error would
    /// (ENOENT for 404, EACCES for 403, EROFS for a write mode), `why` what was tried.
    #[error("unable to open file: name = '{url}', {}, remote: {why}", OsError(&io::Error::from_raw_os_error(*errno)))]
    RemoteOpen {
        url: String,
        errno: i32,
        why: String,
    },
    /// A read of a remote file that failed after its retries, naming the byte range.
    #[error("read failed on '{url}' at offset {offset} ({size} bytes requested): {why}")]
    RemoteRead {
        url: String,
        offset: u64,
        size: u64,
        why: String,
    },
    #[error("device I/O: {0}")]
    Device(String),
    #[error("a panic inside the gds driver was caught in {0}")]
    Panic(&'static str),
}

/// Which HDF5 minor error code best describes an error.
pub use h5gds_runtime::hdf5::ErrorClass;

impl Error {
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidSetting { .. }
            | Error::UnknownConfigKey { .. }
            | Error::MalformedConfig { .. }
            | Error::InvalidArgument(_) => ErrorClass::BadValue,
            Error::Open { .. } | Error::DirectIoRefused { .. } | Error::RemoteOpen { .. } => {
                ErrorClass::CantOpen
            }
            Error::RemoteRead { .. } => ErrorClass::Read,
            Error::Overflow { .. } => ErrorClass::Overflow,
            Error::Io { op, .. } if op.starts_with("read") => ErrorClass::Read,
            Error::Io { .. } => ErrorClass::Write,
            Error::File { .. } | Error::Device(_) | Error::Panic(_) => ErrorClass::Other,
        }
    }
}

/// An OS error in the words of HDF5's own drivers (`errno = 2, error message = 'No such file or
/// directory'`): h5py and other programs that read HDF5's error stack take the error's class and
/// errno from exactly this text, so `gds` failures raise what sec2's do (`FileNotFoundError`...).
struct OsError<'a>(&'a io::Error);

impl std::fmt::Display for OsError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.raw_os_error() {
            Some(errno) => {
                // io::Error prints strerror followed by " (os error N)"; HDF5 prints strerror alone.
                let text = io::Error::from_raw_os_error(errno).to_string();
                let message = text
                    .strip_suffix(&format!(" (os error {errno})"))
                    .unwrap_or(&text);
                write!(f, "errno = {errno}, error message = '{message}'")
            }
            None => write!(f, "{}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_as_hdf5_drivers_write_them() {
        let err = Error::Open {
            path: "/x/y.h5".into(),
            flags: 0x13,
            source: io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(
            err.to_string(),
            "unable to open file: name = '/x/y.h5', errno = 2, error message = 'No such file or directory', flags = 13"
        );
        let err = Error::File {
            op: "unable to lock file (flock)",
            path: "a.h5".into(),
            source: io::Error::from_raw_os_error(libc::EWOULDBLOCK),
        };
        assert!(err
            .to_string()
            .ends_with("errno = 11, error message = 'Resource temporarily unavailable'"));
        let err = Error::Io {
            op: "read",
            path: "d".into(),
            offset: 8,
            size: 4,
            done: 0,
            source: io::Error::from_raw_os_error(libc::EISDIR),
        };
        assert!(err
            .to_string()
            .contains("errno = 21, error message = 'Is a directory'"));
    }
}
