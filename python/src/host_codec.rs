//! `h5gds.read` of compressed chunks into host memory on all cores: the h5py side of
//! `h5gds_chunk_codec` (the decoding array-io uses too). The stored chunks come from the engine's
//! source (`h5gds_engine::chunks`, through `hdf5::stored_chunks`, under h5py's lock); the
//! driver's I/O threads read their bytes from the file directly where that is sound
//! (`hdf5::direct_file`: a file open read-only through sec2 or gds), else the calling thread
//! reads them with `H5Dread_chunk`; the threads decode them and copy their elements into the
//! output. Chunks never written are read through HDF5 (which fills them with the fill value) and
//! placed. Pipelines h5gds does not decode, and selections inside
//! one chunk (which HDF5 serves from its chunk cache), stay with HDF5.

use crate::hdf5::{self, Hid, Prepared};
use h5gds_chunk_codec::place::chunks_selected;
use h5gds_chunk_codec::{
    place_missing, read_placed, Decoding, Filter, HostRead, Hyperslab, Pipeline, Placed,
};
use std::ffi::c_void;

/// Why a host read failed: HDF5 failed or a chunk does not decode (OSError).
pub struct Failed(pub String);

/// One host read of a chunked, filtered dataset whose stored type is the memory type.
pub struct CompressedHostRead<'a> {
    pub dataset: Hid,
    pub name: &'a str,
    pub chunk: &'a [u64],
    pub filters: &'a [Filter],
    pub start: &'a [u64],
    pub step: &'a [u64],
    pub count: &'a [u64],
    pub element_size: usize,
    pub threads: usize,
}

impl CompressedHostRead<'_> {
    /// Why this read stays with HDF5, if it does; else the pipeline h5gds decodes.
    pub fn plan(&self) -> Result<Pipeline, String> {
        let pipeline = Pipeline::for_filters(self.filters, self.element_size)?;
        if self.chunk.len() != self.count.len() {
            return Err("its chunk shape does not match its rank".into());
        }
        let selection = self.selection();
        if chunks_selected(&selection, self.chunk).len() < 2 {
            return Err(
                "the selection lies in one chunk, which HDF5 decodes and keeps in its chunk cache"
                    .into(),
            );
        }
        Ok(pipeline)
    }

    fn selection(&self) -> Hyperslab<'_> {
        Hyperslab {
            start: self.start,
            step: self.step,
            count: self.count,
        }
    }

    /// Reads the selection into `out` (the prepared transfer's buffer); returns the chunks
    /// decoded and the parts of chunks never written. Runs without the GIL, under h5py's lock.
    pub fn run(
        &self,
        pipeline: &Pipeline,
        prepared: &Prepared,
        out: &mut [u8],
    ) -> Result<(usize, usize, bool), Failed> {
        let r = HostRead {
            pipeline,
            chunk: self.chunk,
            element_size: self.element_size,
            selection: self.selection(),
            threads: self.threads,
        };
        let touched = chunks_selected(&r.selection, self.chunk).len();
        let mut source = hdf5::stored_chunks(self.dataset, self.name, self.chunk, touched, Failed)?;
        let outcome = h5gds_chunk_codec::read(&mut source, &r, out)?;
        for part in &outcome.missing {
            let mut values = vec![0u8; part.len() as usize * self.element_size];
            // SAFETY: the part is a piece of the checked selection and `values` holds its
            // elements in the memory type.
            unsafe {
                prepared.run_hyperslab(
                    &part.file_start(&r.selection),
                    self.step,
                    &part.count,
                    values.as_mut_ptr().cast::<c_void>(),
                )
            }
            .map_err(|m| {
                Failed(format!(
                    "dataset {}: H5Dread of the chunk never written at {:?} failed: {m}",
                    self.name, part.offset
                ))
            })?;
            place_missing(part, &values, &r, out);
        }
        Ok((outcome.decoded, outcome.missing.len(), outcome.direct))
    }
}

/// Reads a gather's runs of rows (`runs`: hyperslabs, each at its byte of `out`) of a chunked,
/// filtered dataset through h5py's HDF5 with every chunk they touch read raw and decoded once,
/// on `threads` of the pool (`h5gds_chunk_codec::read_placed`), where HDF5 would decode them on
/// this thread; parts of chunks never written read through HDF5 (`prepared`: a transfer checked
/// over the runs' span). For files the layouts do not serve (open for writing, SWMR). Returns
/// the chunks decoded and the parts never written. Runs without the GIL, under h5py's lock.
pub fn gather_runs(
    dataset: Hid,
    name: &str,
    how: &Decoding,
    runs: &[Placed],
    prepared: &Prepared,
    out: &mut [u8],
) -> Result<(usize, usize), Failed> {
    let (chunk, element_size) = (how.chunk, how.element_size);
    let touched: std::collections::BTreeSet<Vec<u64>> = runs
        .iter()
        .flat_map(|run| chunks_selected(&run.selection, chunk))
        .map(|part| part.offset)
        .collect();
    let mut source = hdf5::stored_chunks(dataset, name, chunk, touched.len(), Failed)?;
    let (outcome, missing_of) = read_placed(&mut source, how, runs, out)?;
    for (part, &k) in outcome.missing.iter().zip(&missing_of) {
        let run = &runs[k];
        let mut values = vec![0u8; part.len() as usize * element_size];
        // SAFETY: the part is a piece of the run, inside the checked span, and `values` holds
        // its elements in the memory type.
        unsafe {
            prepared.run_hyperslab(
                &part.file_start(&run.selection),
                run.selection.step,
                &part.count,
                values.as_mut_ptr().cast::<c_void>(),
            )
        }
        .map_err(|m| {
            Failed(format!(
                "dataset {name}: H5Dread of the chunk never written at {:?} failed: {m}",
                part.offset
            ))
        })?;
        let first = run.at as usize;
        let len = run.selection.count.iter().product::<u64>() as usize * element_size;
        let r = HostRead {
            pipeline: how.pipeline,
            chunk,
            element_size,
            selection: run.selection,
            threads: 1,
        };
        place_missing(part, &values, &r, &mut out[first..first + len]);
    }
    Ok((outcome.decoded, outcome.missing.len()))
}

/// Reads `read` (its chunks decoded by h5gds on `read.threads` of the driver's I/O threads) into
/// the host buffer at `buffer` (`nbytes`, checked with `prepared`), the GIL released. Returns
/// None when the read is done, or why h5gds leaves it to HDF5 (nothing was read). The caller
/// holds h5py's lock and keeps the buffer alive.
pub fn read_into_host(
    py: pyo3::Python<'_>,
    read: &CompressedHostRead,
    prepared: &Prepared,
    buffer: usize,
    nbytes: usize,
) -> pyo3::PyResult<Option<String>> {
    use pyo3::exceptions::{PyOSError, PyValueError};
    let name = read.name;
    let turned_off = h5gds_runtime::settings::host_codec_turned_off()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let pipeline = match turned_off.map_or_else(|| read.plan(), Err) {
        Ok(pipeline) => pipeline,
        Err(reason) => {
            h5gds::with_logging(|| {
                tracing::debug!("h5gds.read of {name}: HDF5 decodes its chunks: {reason}")
            });
            return Ok(Some(reason));
        }
    };
    let (decoded, missing, direct) = py
        .detach(|| {
            // SAFETY: the caller passes the address and size of a live, writable host buffer it
            // keeps referenced for the call (checked against the selection in `prepare`).
            let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
            read.run(&pipeline, prepared, out)
        })
        .map_err(|Failed(message)| PyOSError::new_err(message))?;
    h5gds::with_logging(|| {
        tracing::debug!(
            "h5gds.read of {name}: {decoded} chunks decoded on {} threads (read {}), {missing} \
             parts of chunks never written read through HDF5",
            read.threads,
            if direct {
                "from the file by those threads"
            } else {
                "through HDF5 on the calling thread"
            }
        )
    });
    Ok(None)
}
