//! What `h5gds info <url>` says of a URL: how the driver would read it, and whether the object
//! answers one HEAD.

use super::store::{build_store, target_of, StoreFacts};
use super::RemoteFile;
use crate::config::RemoteSettings;
use crate::url_name::shown_url;
use std::sync::Arc;

/// What `h5gds info <url>` says of a URL: how it would be read, and whether the object answers.
#[derive(Debug, Clone)]
pub struct UrlReport {
    /// The URL as shown (no user info nor query).
    pub url: String,
    /// The remote settings in effect (the S3 and remote rows of `SETTINGS`), where they are valid.
    pub settings: Option<RemoteSettings>,
    /// The store, endpoint, region and credentials' source, where the client can be set up.
    pub facts: Option<StoreFacts>,
    /// The object as one HEAD finds it, or why it cannot be read.
    pub object: std::result::Result<ObjectFacts, String>,
}

/// A remote object as its HEAD answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFacts {
    pub size: u64,
    /// The ETag every read would be conditional on.
    pub etag: Option<String>,
    /// The version asked for instead, where the store gives one and no ETag.
    pub version: Option<String>,
}

/// How `url` would be read by the driver opened now in this process (its environment), and
/// whether the object is reachable (one HEAD; an open GETs the first block instead, and asks a
/// HEAD where that fails). Never fails: what goes wrong is the report's `object` error.
pub fn url_report(url: &str) -> UrlReport {
    let shown = shown_url(url);
    let settings = match RemoteSettings::from_env(|name| std::env::var_os(name)) {
        Ok(settings) => settings,
        Err(e) => {
            return UrlReport {
                url: shown,
                settings: None,
                facts: None,
                object: Err(e.to_string()),
            }
        }
    };
    let facts = target_of(url)
        .map_err(|e| e.to_string())
        .and_then(|(target, path)| {
            build_store(&target, &path, &settings, Arc::default())
                .map(|built| built.facts)
                .map_err(|why| format!("cannot set up the client: {why}"))
        });
    let (facts, object) = match facts {
        Ok(facts) => {
            let object = RemoteFile::open(url, 0, &settings)
                .map(|file| ObjectFacts {
                    size: file.size,
                    etag: file.etag.clone(),
                    version: file.version.clone(),
                })
                .map_err(|e| e.to_string());
            (Some(facts), object)
        }
        Err(why) => (None, Err(why)),
    };
    UrlReport {
        url: shown,
        settings: Some(settings),
        facts,
        object,
    }
}
