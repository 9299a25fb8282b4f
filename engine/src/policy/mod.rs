//! The order every read and write takes, for both faces: each decision made once here, called by
//! array-io and the Python extension alike, its verdict (the way taken, `way=...`) logged here in
//! the same words whichever face called, at `H5GDS_LOG=debug` under the target `h5gds::engine`.

pub mod files;
pub mod host_read;
pub mod settings;
