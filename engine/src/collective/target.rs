//! Where rank 0 creates the file, and how the write ends: a temporary name next to the target
//! (hidden, same directory, so the final rename is atomic and a crash never leaves a file under
//! the target name), renamed over the target once every rank has written, else removed.

use std::io;
use std::path::{Path, PathBuf};

/// A file-system step that failed: `op` and the path it was applied to (the target, or the
/// temporary file where it alone was touched).
#[derive(Debug)]
pub struct FileStepError {
    pub op: &'static str,
    pub path: PathBuf,
    pub source: io::Error,
}

/// The temporary name for the target `path`: `.<name>.h5gds-<pid>.partial` beside it.
pub fn temporary_path(path: &Path) -> Result<PathBuf, FileStepError> {
    let name = path.file_name().ok_or_else(|| FileStepError {
        op: "naming a file at",
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"),
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".h5gds-{}.partial", std::process::id()));
    Ok(path.with_file_name(tmp))
}

/// Rank 0, once the writes are agreed: the temporary file `tmp` becomes `path` when every rank
/// `written`, else it goes. A failed rename removes it too.
pub fn finish(tmp: &Path, path: &Path, written: bool) -> Result<(), FileStepError> {
    if written {
        std::fs::rename(tmp, path).map_err(|source| {
            let _ = std::fs::remove_file(tmp);
            FileStepError {
                op: "renaming the written file into place at",
                path: path.to_path_buf(),
                source,
            }
        })
    } else {
        std::fs::remove_file(tmp).map_err(|source| FileStepError {
            op: "removing the partly written file",
            path: tmp.to_path_buf(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_file_is_renamed_into_place_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t.h5");
        let tmp = temporary_path(&target).unwrap();
        let name = format!(".t.h5.h5gds-{}.partial", std::process::id());
        assert_eq!(tmp, dir.path().join(name));
        std::fs::write(&tmp, b"new").unwrap();
        finish(&tmp, &target, true).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        std::fs::write(&tmp, b"partial").unwrap();
        finish(&tmp, &target, false).unwrap();
        assert!(!tmp.exists() && target.exists());
        // A directory in the way: the rename fails, naming the target, and the file goes.
        std::fs::write(&tmp, b"partial").unwrap();
        let err = finish(&tmp, dir.path(), true).unwrap_err();
        assert_eq!(err.op, "renaming the written file into place at");
        assert!(!tmp.exists());
        assert_eq!(
            temporary_path(Path::new("/")).unwrap_err().op,
            "naming a file at"
        );
    }
}
