//! The order every read and write takes, for both faces: each decision written once here, over
//! the engine's mechanisms, and each verdict (the way a transfer took) logged here in the same
//! words whichever face called, at `H5GDS_LOG=debug` under the target `h5gds::engine`.

pub mod device_read;
