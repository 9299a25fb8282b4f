//! A read into host memory, for both faces, in one order: a read-only file's own bytes with no
//! HDF5 call ([`read_stored`], `crate::stored`), else the chunks h5gds reads and decodes on the
//! driver's I/O threads (`crate::decoded`; unfiltered chunks too, read straight from the file),
//! else one `H5Dread`. Each step is asked once here ([`read`]) and the way taken is logged here
//! ([`Way`]); the face ([`HostFace`]) supplies its dataset's storage, its HDF5 calls, its locks
//! and its error type.

use super::settings::CallSettings;
use crate::decoded::{self, Decoded, Plan};
use crate::facts::StoredLayout;
use crate::stored::Stored;
use crate::Error;
use h5gds_chunk_codec::Hyperslab;

/// The way a read took, as its verdict line names it (`way=...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// No HDF5 call: a read-only file's own bytes ([`read_stored`]).
    Stored,
    /// Chunks read and decoded by h5gds on the host's cores.
    HostDecoded,
    /// One `H5Dread`.
    Hdf5,
}

impl Way {
    /// The way's name in the verdict line.
    pub fn name(self) -> &'static str {
        match self {
            Way::Stored => "stored",
            Way::HostDecoded => "host-decoded",
            Way::Hdf5 => "hdf5",
        }
    }
}

/// What a face gives a host read: its dataset as it holds it, its HDF5 calls under its lock,
/// and its errors.
pub trait HostFace {
    /// The face's error.
    type Error;

    /// The dataset's name, for the verdict line.
    fn name(&self) -> String;

    /// The engine's storage of the dataset for this read (a read-only file's own bytes, read
    /// in the stored type), resolved once and kept by the face; None where the engine does not
    /// serve the dataset.
    fn stored(&self) -> Result<Option<&Stored>, Self::Error>;

    /// How the dataset is stored, and why HDF5 converts its elements into the read's memory
    /// type, if it does.
    fn facts(&self) -> Result<(StoredLayout, Option<String>), Self::Error>;

    /// Reads `sel` into `out` with h5gds reading and decoding its chunks as `plan` says
    /// (`decoded::read_hyperslab` over the face's stored chunks).
    fn decode(&self, plan: &Plan, sel: Hyperslab, out: &mut [u8]) -> Result<Decoded, Self::Error>;

    /// Reads `sel` into `out` with one `H5Dread` in the read's memory type.
    fn hdf5(&self, sel: Hyperslab, out: &mut [u8]) -> Result<(), Self::Error>;

    /// Runs `work`, which moves bytes with no HDF5 call, as the face runs long work (Python: the
    /// GIL released).
    fn unlocked<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        work()
    }

    /// The engine's error, as the face's.
    fn error(&self, e: Error) -> Self::Error;
}

/// Reads `sel` of the face's dataset into `out` (its elements, row-major, in the read's memory
/// type): with no HDF5 call where the engine serves it, else with h5gds decoding its chunks where
/// it decodes them and the read spans two chunks or more, else with one `H5Dread`. The way taken
/// is returned and logged.
pub fn read<F: HostFace>(
    face: &F,
    sel: Hyperslab,
    out: &mut [u8],
    settings: &CallSettings,
) -> Result<Way, F::Error> {
    if let Some(stored) = face.stored()? {
        let served = face.unlocked(|| read_stored(stored, &sel, out, settings));
        if served.map_err(|e| face.error(e))? {
            return Ok(Way::Stored);
        }
    }
    let (layout, conversion) = face.facts()?;
    let chunked = matches!(layout, StoredLayout::Chunked { .. });
    // The thread count is asked only where h5gds may decode.
    let threads = match chunked && conversion.is_none() {
        true => settings.nthreads().map_err(|e| face.error(e.into()))?,
        false => 1,
    };
    let elements: u64 = sel.count.iter().product();
    let element_size = match elements {
        0 => 0,
        n => out.len() / n as usize,
    };
    let rank = sel.count.len();
    let planned = decoded::plan(&layout, conversion.as_deref(), rank, element_size, threads)
        .map_err(|e| face.error(e.into()))?
        .and_then(|plan| {
            let touched = decoded::chunks_touched(plan.chunk(), [sel]);
            plan.spread_over(touched, "the selection lies")
        });
    match planned {
        Ok(plan) => {
            let done = face.decode(&plan, sel, out)?;
            verdict(Way::HostDecoded, format_args!("{}: {done}", face.name()));
            Ok(Way::HostDecoded)
        }
        Err(why) => {
            face.hdf5(sel, out)?;
            verdict(
                Way::Hdf5,
                format_args!("{}: one H5Dread: {why}", face.name()),
            );
            Ok(Way::Hdf5)
        }
    }
}

/// The first way of [`read`], alone (`Kept::read`: Python's remembered reads): `sel` read into
/// `out` with no HDF5 call where `stored` serves it, on the driver's I/O threads where the read is
/// large enough to gain from them (`Stored::threads_for`); false, nothing read, where HDF5 is to
/// read it (chunks never written; filtered chunks with `H5GDS_HOST_CODEC=0`). The selection and
/// the size of `out` are checked against the dataset first.
pub(crate) fn read_stored(
    stored: &Stored,
    sel: &Hyperslab,
    out: &mut [u8],
    settings: &CallSettings,
) -> Result<bool, Error> {
    stored.check(sel, out.len()).map_err(Error::invalid)?;
    if out.is_empty() {
        return Ok(true);
    }
    let Some(parts) = stored.serves(sel).map_err(Error::invalid)? else {
        return Ok(false);
    };
    let nthreads = || settings.nthreads().map_err(|e| e.to_string());
    let threads = stored.threads_for(out.len(), &parts, &nthreads)?;
    stored.read_served(sel, &parts, out, threads)?;
    verdict(
        Way::Stored,
        format_args!(
            "{}: {} bytes, {} chunks, on {threads} threads, with no HDF5 call",
            stored.name(),
            out.len(),
            parts.len()
        ),
    );
    Ok(true)
}

/// The verdict line of a host read: the way it took, then what the way says of it.
fn verdict(way: Way, detail: std::fmt::Arguments<'_>) {
    super::say(format_args!("host read: way={}: {detail}", way.name()));
}
