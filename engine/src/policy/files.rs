//! What a face call may do with the file it names, decided once for both faces: a URL
//! (`s3://`, `https://`, `http://`) names a remote file, which h5gds reads only, so a write to
//! one is refused before anything is created (no local file named like the URL).

/// Why a write to `path` is refused: it is a URL (shown without credentials). None for a local
/// path.
pub fn refused_for_writing(path: &str) -> Option<String> {
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
    }
}
