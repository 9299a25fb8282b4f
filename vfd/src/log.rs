//! Logging to stderr through `tracing`, filtered by `H5GDS_LOG` (default `warn`).
//!
//! The driver runs inside other people's processes, so it never installs a global subscriber: its
//! own dispatcher is made current only while driver code runs (`with_logging`).

use crate::config::LOG_ENV;
use std::sync::OnceLock;
use tracing::Dispatch;
use tracing_subscriber::EnvFilter;

fn dispatch() -> &'static Dispatch {
    static DISPATCH: OnceLock<Dispatch> = OnceLock::new();
    DISPATCH.get_or_init(|| {
        let requested = std::env::var(LOG_ENV).ok();
        let (filter, rejected) = match requested.as_deref().map(EnvFilter::try_new) {
            None => (EnvFilter::new("warn"), None),
            Some(Ok(filter)) => (filter, None),
            Some(Err(err)) => (EnvFilter::new("warn"), Some(err)),
        };
        let subscriber = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_env_filter(filter)
            .finish();
        let dispatch = Dispatch::new(subscriber);
        if let Some(err) = rejected {
            tracing::dispatcher::with_default(&dispatch, || {
                tracing::warn!(
                    "ignoring {LOG_ENV}={:?} ({err}); logging at warn",
                    requested.unwrap_or_default()
                )
            });
        }
        dispatch
    })
}

/// Runs `f` with the driver's logger as the current dispatcher.
pub fn with_logging<R>(f: impl FnOnce() -> R) -> R {
    tracing::dispatcher::with_default(dispatch(), f)
}
