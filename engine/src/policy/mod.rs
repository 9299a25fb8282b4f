//! The order every read and write takes, for both faces: which way a request goes (with no HDF5
//! call, decoded by h5gds, or through HDF5), with what limits, decided here once so that array-io
//! and the Python extension take the same way and log the same verdict
//! (`way=<name>`, tracing target `h5gds::engine`, at `H5GDS_LOG=debug`).

pub mod gather;

/// Writes a verdict line: the way a read or write took, in the same words whichever face called.
fn verdict(line: std::fmt::Arguments<'_>) {
    h5gds::with_logging(|| tracing::debug!(target: "h5gds::engine", "{line}"));
}
