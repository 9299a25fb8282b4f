//! The order every read and write takes, for both faces: each decision written once here, over
//! the engine's mechanisms, and each verdict (the way a transfer took) logged here in the same
//! words whichever face called, at `H5GDS_LOG=debug` under the target `h5gds::engine`.

pub mod device_read;
pub mod files;
pub mod gather;
pub mod host_read;
pub mod settings;
pub mod write;

/// Writes one of the engine's debug lines (target `h5gds::engine`), through the driver's logger:
/// every verdict line of the engine goes through here.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    if logged() {
        h5gds::with_logging(|| tracing::debug!(target: "h5gds::engine", "{line}"));
    }
}

/// Whether the engine's lines are logged (`H5GDS_LOG` at debug for `h5gds::engine`), asked once:
/// the driver's filter is fixed when its logger is made, and a row read costs two microseconds.
fn logged() -> bool {
    static LOGGED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LOGGED.get_or_init(|| {
        h5gds::with_logging(|| tracing::enabled!(target: "h5gds::engine", tracing::Level::DEBUG))
    })
}
