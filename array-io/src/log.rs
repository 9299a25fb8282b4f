//! Log lines, written like the `gds` driver's: to stderr, filtered by `H5GDS_LOG` (default
//! `warn`, so `H5GDS_LOG=debug` shows why data took the staged path). The driver's dispatcher is
//! made current only while a line is written; array-io installs no global logger.

/// Writes a debug line.
pub(crate) fn debug(message: std::fmt::Arguments<'_>) {
    h5gds::with_logging(|| tracing::debug!(target: "array_io", "{message}"));
}
