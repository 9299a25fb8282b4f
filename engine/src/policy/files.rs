//! What a face call may do with the file it names, decided once for both faces ([`opening`]):
//! every setting is checked before HDF5 is asked, and a URL (`s3://`, `https://`, `http://`)
//! names a remote file, which h5gds reads only, so a write to one is refused before anything is
//! created (no local file named like the URL).

use crate::{Error, ErrorKind, Result};
use h5gds_runtime::settings::{environment_device_path, DevicePath};

/// Linux's EROFS: the OS's error number of a write to a read-only file system.
const EROFS: i32 = 30;

/// Checks a face call's open of a file before it opens it, or creates `write_to` (None: a read,
/// or an open not yet named): every `H5GDS_*` setting (`policy::settings::check`: an invalid one
/// is refused naming it and what it accepts, where HDF5's refusal would name only the open), and
/// a write to a URL, refused as an [`ErrorKind::Io`] of errno 30 (EROFS) naming the file. Returns
/// the device path the environment asks for (`H5GDS_USE_VFD_GDS`).
pub fn opening(write_to: Option<&str>) -> Result<DevicePath> {
    super::settings::check()?;
    if let Some(why) = write_to.and_then(refused_for_writing) {
        return Err(Error::new(ErrorKind::Io, why).with_errno(Some(EROFS)));
    }
    Ok(environment_device_path()?)
}

/// Why a write to `path` is refused: it is a URL (shown without credentials). None for a local
/// path.
fn refused_for_writing(path: &str) -> Option<String> {
    h5gds::is_url(path).then(|| {
        format!(
            "{} names a remote file, and remote files are read-only: h5gds reads them but never \
             writes them; write to a local path and upload it",
            h5gds::shown_url(path)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_refused_for_writing_and_local_paths_are_not() {
        let refused = refused_for_writing("s3://bucket/x.h5").unwrap();
        assert!(
            refused.starts_with("s3://bucket/x.h5 names a remote file"),
            "{refused}"
        );
        assert!(refused_for_writing("HTTPS://host/x.h5").is_some());
        assert_eq!(refused_for_writing("out/s3.h5"), None);
        let refused = opening(Some("s3://bucket/x.h5")).unwrap_err();
        assert_eq!(
            (refused.kind(), refused.facts().errno),
            (ErrorKind::Io, Some(EROFS))
        );
        assert!(
            refused.to_string().contains("s3://bucket/x.h5"),
            "{refused}"
        );
    }
}
