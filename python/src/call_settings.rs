//! The driver's settings as one native call sees them: made by the call's entry (`io_call`,
//! `gather_call`, `known_read`, ...), handed down by reference, and read from the environment at
//! most once, when a step first needs them. A read that never asks (a row of a read-only file:
//! reading them would cost as much as the read) never reads them.

use std::sync::OnceLock;

/// The driver's settings (`h5gds::VfdSettings`) for one native call, loaded at the first ask; an
/// invalid setting is remembered as its message (naming the setting), not parsed again.
#[derive(Default)]
pub struct CallSettings(OnceLock<Result<h5gds::VfdSettings, String>>);

impl CallSettings {
    /// The settings, loaded now if this call has not loaded them yet.
    pub fn get(&self) -> Result<&h5gds::VfdSettings, String> {
        self.0
            .get_or_init(|| h5gds::VfdSettings::load(None).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The driver's I/O thread count, which also decodes chunks on the host.
    pub fn nthreads(&self) -> Result<usize, String> {
        self.get().map(|s| s.nthreads)
    }
}
