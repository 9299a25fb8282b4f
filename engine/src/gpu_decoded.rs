//! Where the compressed chunks of a read into device memory are decoded, written once for both
//! faces ([`decoder`]: on the GPU with nvCOMP, by h5gds on the host's threads, or by HDF5's
//! filters), and whether the stored chunks of a GPU-decoded read (`crate::device`) reach the GPU
//! through the host's threads rather than the driver ([`host_reads`]). Each face words its log
//! lines around the words returned here.

use h5gds::VfdSettings;
use h5gds_chunk_codec::place::chunks_selected;
use h5gds_chunk_codec::Hyperslab;
use h5gds_gpu_codec::decode::HostReads;
use h5gds_route::route::{choose_decoder, gpu_decode, Decoder, DecoderFacts};
use h5gds_runtime::settings::{self, DevicePath, InvalidSetting};

const RANK_DIFFERS: &str = "its chunk shape does not match its rank";

/// What a face knows of a read into device memory of a dataset whose chunks pass `filters`.
pub struct CompressedRead<'a> {
    pub filters: &'a [i32],
    /// The chunk shape, in elements.
    pub chunk: &'a [u64],
    /// The selection, in file coordinates.
    pub selection: &'a Hyperslab<'a>,
    /// Bytes per element.
    pub item: usize,
    /// Why the driver cannot take the device pointer, if it cannot: nvCOMP cannot then either.
    pub blocker: Option<String>,
    /// Whether h5gds decodes the pipeline on the host's threads, or why not (the face's verdict).
    pub host: Result<(), String>,
    /// The host's decoding threads (the driver's I/O threads).
    pub host_threads: usize,
}

/// Where the chunks `read` touches are decoded (`route::choose_decoder`; `None`: by HDF5's
/// filters, staged), with the choice and its reason in words for the face's log line ("its
/// chunks are decoded ..."). libnvcomp is loaded only for a read it could serve, and not with
/// decoding on the GPU turned off.
pub fn decoder(read: CompressedRead) -> Result<(Option<Decoder>, String), InvalidSetting> {
    let forced = settings::gpu_codec_forced()?;
    let rank_matches = read.selection.count.len() == read.chunk.len();
    let strided = (read.selection.step.iter())
        .zip(read.selection.count)
        .any(|(&s, &c)| s > 1 && c > 1);
    let stop = (read.blocker)
        .or_else(|| {
            strided.then(|| {
                "the selection has steps greater than 1, which the GPU decoding path does not \
                 place"
                    .to_string()
            })
        })
        .or(settings::gpu_codec_turned_off()?);
    let (filters, stop) = (read.filters, stop.as_deref());
    let gpu = gpu_decode(filters, None, stop)
        .and_then(|_| {
            let missing = h5gds_gpu_codec::nvcomp::library().err();
            gpu_decode(filters, missing.as_deref(), stop)
        })
        .and_then(|codec| (rank_matches.then_some(codec)).ok_or_else(|| RANK_DIFFERS.into()));
    let host = (read.host).and_then(|()| (rank_matches.then_some(())).ok_or(RANK_DIFFERS.into()));
    // Only the weighing of both sides counts the chunks.
    let chunks = match (&gpu, &host) {
        (Ok(_), Ok(())) => chunks_selected(read.selection, read.chunk).len(),
        _ => 0,
    };
    let facts = DecoderFacts {
        gpu,
        host,
        chunk_bytes: read.chunk.iter().product::<u64>() as usize * read.item,
        chunks,
        host_threads: read.host_threads,
        forced,
        verify: settings::verify_checksums()?,
    };
    let (choice, why) = choose_decoder(&facts);
    let side = match choice {
        Some(Decoder::Gpu(_)) => "on the GPU with nvCOMP".to_string(),
        Some(Decoder::Host) => format!(
            "by h5gds on {} host threads, then copied to device memory, not on the GPU with nvCOMP",
            facts.host_threads
        ),
        None => "by HDF5 on the host, not on the GPU with nvCOMP".to_string(),
    };
    Ok((choice, format!("its chunks are decoded {side}: {why}")))
}

/// Where the stored chunks of a GPU-decoded read are read by the host's threads ([`HostReads`])
/// rather than through the gds driver one chunk per call: HDF5 has the file open read-only
/// through a driver whose addresses are the file's offsets (`direct_file`), and either that
/// driver is another one (`other_driver`: sec2, which never reads into device memory) or the gds
/// driver would stage device reads anyway (its settings `vfd`, no GDS kernel path). Never where
/// `path` asks for the driver's device path (`H5GDS_USE_VFD_GDS=1`) with the gds driver, nor
/// for staging the whole read (`H5GDS_USE_VFD_GDS=0`).
pub fn host_reads(
    path: DevicePath,
    other_driver: Option<&str>,
    vfd: &VfdSettings,
    direct_file: impl FnOnce() -> Option<std::fs::File>,
) -> Option<HostReads> {
    let why = match other_driver {
        _ if path == DevicePath::Staged => return None,
        Some(driver) => format!("the file is open with the {driver} driver"),
        None if path == DevicePath::Gds => return None,
        None => h5gds::device_transfers_staged(vfd)?,
    };
    direct_file().map(|file| HostReads {
        file,
        threads: vfd.nthreads,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use h5gds::CompatMode;

    #[test]
    fn the_host_reads_the_stored_chunks_where_the_driver_would_stage_them_or_is_another() {
        let file = || tempfile::tempfile().ok();
        let on = VfdSettings {
            compat_mode: CompatMode::On,
            nthreads: 3,
            ..VfdSettings::default()
        };
        let reads = host_reads(DevicePath::Auto, None, &on, file).expect("staged by the driver");
        assert_eq!(
            (reads.threads, reads.why.contains("compat_mode=on")),
            (3, true)
        );
        let sec2 = host_reads(DevicePath::Gds, Some("sec2"), &on, file).expect("another driver");
        assert_eq!(sec2.why, "the file is open with the sec2 driver");
        assert!(host_reads(DevicePath::Gds, None, &on, file).is_none());
        assert!(host_reads(DevicePath::Staged, Some("sec2"), &on, file).is_none());
        assert!(host_reads(DevicePath::Auto, None, &on, || None).is_none());
    }

    #[test]
    fn a_blocked_or_strided_read_is_decoded_on_the_host_where_h5gds_can() {
        let (start, step, count) = ([0u64, 0], [1u64, 2], [4u64, 3]);
        let selection = Hyperslab {
            start: &start,
            step: &step,
            count: &count,
        };
        let read = |blocker: Option<&str>, host: Result<(), String>, chunk: &[u64]| {
            let read = CompressedRead {
                filters: &[32015],
                chunk,
                selection: &selection,
                item: 4,
                blocker: blocker.map(str::to_string),
                host,
                host_threads: 2,
            };
            decoder(read).expect("no H5GDS_GPU_CODEC in the tests' environment")
        };
        let (choice, words) = read(None, Ok(()), &[2, 2]);
        assert_eq!(choice, Some(Decoder::Host));
        assert!(words.starts_with("its chunks are decoded by h5gds on 2 host threads"));
        assert!(
            words.ends_with("which the GPU decoding path does not place"),
            "{words}"
        );
        let (choice, words) = read(Some("a bool"), Err("a conversion".into()), &[2, 2]);
        assert_eq!(choice, None);
        assert!(
            words.contains("(a bool)") && words.contains("(a conversion)"),
            "{words}"
        );
        let (choice, words) = read(Some("a bool"), Ok(()), &[2]);
        assert_eq!(choice, None);
        assert!(
            words.ends_with("(its chunk shape does not match its rank)"),
            "{words}"
        );
    }
}
