//! File names that are URLs: which ones the driver reads remotely (`remote`), and how messages
//! and `h5gds info` show one (never its credentials). A leaf, so that settings (`config`) and the
//! remote reads can both use it.

use url::Url;

/// Whether HDF5's file name is a URL this driver reads remotely (case-insensitive scheme).
pub fn is_url(name: &str) -> bool {
    let lower = name.get(..8).unwrap_or(name).to_ascii_lowercase();
    ["s3://", "http://", "https://"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
}

/// `url` as messages show it: no user name or password, no query (a presigned URL's signature)
/// nor fragment.
pub fn shown_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) => {
            // Errors here only mean the URL cannot have the part, so there is none to hide.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            let hidden = parsed.query().is_some();
            parsed.set_query(None);
            parsed.set_fragment(None);
            let mut text = parsed.to_string();
            if hidden {
                text.push_str("?<query hidden>");
            }
            text
        }
        // Unparsable: show the scheme and host part only, never the rest verbatim.
        Err(_) => url.split(['@', '?']).next().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths_and_shown_without_secrets() {
        assert!(is_url("s3://bucket/key.h5"));
        assert!(is_url("HTTPS://host/x.h5"));
        assert!(is_url("http://127.0.0.1:8080/a.h5"));
        assert!(!is_url("/data/s3://x.h5"));
        assert!(!is_url("file.h5"));
        assert!(!is_url("s3:/bucket"));
        assert_eq!(
            shown_url("https://user:secret@host/a.h5?X-Amz-Signature=abc"),
            "https://host/a.h5?<query hidden>"
        );
        assert!(!shown_url("https://user:pw@host/a.h5").contains("pw"));
        assert_eq!(shown_url("s3://bucket/key.h5"), "s3://bucket/key.h5");
    }
}
