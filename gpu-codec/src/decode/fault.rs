//! Naming the chunk at fault after a batched nvCOMP call that did not decode whole (see the
//! parent module's documentation): the jobs to suspect, each suspect decoded again alone, and
//! the words of the error.

use crate::device::DeviceFailure;
use crate::nvcomp::{self, Job, Outcome};
use cudarc::driver::CudaStream;
use h5gds_route::route::GpuCodec;
use h5gds_runtime::stream::context_usable;
use nvcomp_sys::NvcompLib;
use std::sync::Arc;

/// Why a batch's jobs did not all decode: the chunk to name (its index in the batch) and why,
/// or a device failure no one chunk can be blamed for.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed {
    Chunk(usize, String),
    Device(DeviceFailure),
}

/// The jobs a batched call's `outcomes` point at: those nvCOMP marked failed; if none is, those
/// whose decoded size is not the `jobs`' output size (nvCOMP may leave a failed batch's sizes
/// unwritten, and their statuses then read as the zero fill, `nvcompSuccess`).
pub fn suspect_jobs(outcomes: &[Outcome], jobs: &[Job]) -> Vec<usize> {
    let failed: Vec<usize> = (0..outcomes.len())
        .filter(|&k| outcomes[k].status != nvcomp_sys::nvcompStatus_t::nvcompSuccess)
        .collect();
    if !failed.is_empty() {
        return failed;
    }
    (0..outcomes.len())
        .filter(|&k| outcomes[k].written != jobs[k].output_len)
        .collect()
}

/// What nvCOMP said about one suspect job.
fn job_failure(outcome: &Outcome, job: &Job) -> String {
    if outcome.status != nvcomp_sys::nvcompStatus_t::nvcompSuccess {
        format!(
            "nvCOMP could not decode it ({})",
            nvcomp::status_text(outcome.status)
        )
    } else {
        format!(
            "it decoded to {} bytes, not the {} expected",
            outcome.written, job.output_len
        )
    }
}

/// The chunks at `offsets` as a list for messages ("[0], [25], [50]"), at most 8 of them.
fn chunk_list(offsets: &[&[u64]]) -> String {
    const SHOWN: usize = 8;
    let mut text: Vec<String> = offsets
        .iter()
        .take(SHOWN)
        .map(|o| format!("{o:?}"))
        .collect();
    if offsets.len() > SHOWN {
        text.push(format!("and {} more", offsets.len() - SHOWN));
    }
    text.join(", ")
}

/// The failure of a call after which the CUDA context is unusable, naming the chunks it held.
fn sticky(e: &DeviceFailure, offsets: &[&[u64]]) -> Failed {
    let what = if offsets.len() == 1 {
        format!("the chunk at {}", chunk_list(offsets))
    } else {
        format!("one of the chunks at {}", chunk_list(offsets))
    };
    Failed::Device(DeviceFailure::new(
        format!("nvCOMP: decoding {what}"),
        format!(
            "{e}; the CUDA context can no longer be used (a sticky error), so the chunk at \
             fault cannot be found by decoding each alone: {what} may be corrupt"
        ),
    ))
}

/// Judges a batched call over `jobs` (`first`: its outcomes, or its failure); job k belongs to
/// the batch's chunk `owners[k]`, whose first element is `offsets[owners[k]]`. When the batch
/// did not decode whole, names the chunk at fault (see the module's documentation): a single
/// suspect at once; several suspects, or a failed call, after decoding each suspect chunk again
/// in a call of its own on `stream` (only after a failure, so the good path pays nothing; the
/// jobs' buffers must still hold their input). The chunks that still fail are named, the first
/// in chunk order; if none does, the batch's failure is reported on its first suspect, saying
/// that each chunk decodes alone.
pub fn judge(
    lib: &NvcompLib,
    codec: GpuCodec,
    stream: &Arc<CudaStream>,
    first: Result<Vec<Outcome>, DeviceFailure>,
    jobs: &[Job],
    owners: &[usize],
    offsets: &[&[u64]],
) -> Result<(), Failed> {
    let chunks_of = |ks: &mut dyn Iterator<Item = usize>| {
        let mut chunks: Vec<usize> = ks.map(|k| owners[k]).collect();
        chunks.sort_unstable();
        chunks.dedup();
        chunks
    };
    let in_batch = chunks_of(&mut (0..jobs.len()));
    // The batch's own word on its first suspect: the failure of the call, or of a job.
    let said: String;
    let suspects = match &first {
        Ok(outcomes) => {
            let ks = suspect_jobs(outcomes, jobs);
            let Some(&k) = ks.first() else {
                return Ok(());
            };
            let why = job_failure(&outcomes[k], &jobs[k]);
            let chunks = chunks_of(&mut ks.iter().copied());
            if chunks.len() == 1 {
                return Err(Failed::Chunk(
                    owners[k],
                    format!("{why}; the file may be corrupt"),
                ));
            }
            said = format!("in the batch holding it, {why}");
            chunks
        }
        Err(e) => {
            let held: Vec<&[u64]> = in_batch.iter().map(|&c| offsets[c]).collect();
            if !context_usable(stream) {
                return Err(sticky(e, &held));
            }
            said = format!("the batch holding it failed to decode on the GPU: {e}");
            if in_batch.len() == 1 {
                return Err(Failed::Chunk(in_batch[0], said));
            }
            in_batch.clone()
        }
    };
    // Each suspect chunk in a call of its own: whatever that call reports is about that chunk.
    let mut failing: Vec<(usize, String)> = Vec::new();
    for &c in &suspects {
        let alone: Vec<Job> = (0..jobs.len())
            .filter(|&k| owners[k] == c)
            .map(|k| jobs[k])
            .collect();
        match nvcomp::decompress(lib, codec, stream, &alone) {
            Ok(outcomes) => {
                if let Some(&k) = suspect_jobs(&outcomes, &alone).first() {
                    let why = job_failure(&outcomes[k], &alone[k]);
                    failing.push((c, format!("{why}; the file may be corrupt")));
                }
            }
            Err(e) => {
                if !context_usable(stream) {
                    return Err(sticky(&e, &[offsets[c]]));
                }
                failing.push((
                    c,
                    format!(
                        "it failed to decode on the GPU in a call of its own: {e}; the file may \
                         be corrupt"
                    ),
                ));
            }
        }
    }
    if let Some(((c, why), others)) = failing.split_first() {
        let mut why = why.clone();
        if !others.is_empty() {
            let rest: Vec<&[u64]> = others.iter().map(|&(o, _)| offsets[o]).collect();
            why.push_str(&format!(
                " (nor do the chunks at {} of its batch)",
                chunk_list(&rest)
            ));
        }
        return Err(Failed::Chunk(*c, why));
    }
    // Every suspect decodes alone: the batch's failure is no one chunk's.
    let all: Vec<&[u64]> = suspects.iter().map(|&c| offsets[c]).collect();
    Err(Failed::Chunk(
        suspects[0],
        format!(
            "{said}; yet each of the chunks at {} decodes in a call of its own, so the device \
             rather than the file may be at fault",
            chunk_list(&all)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(output_len: usize) -> Job {
        Job {
            input: 0,
            input_len: 1,
            output: 0,
            output_len,
        }
    }

    fn outcome(status: nvcomp_sys::nvcompStatus_t, written: usize) -> Outcome {
        Outcome { status, written }
    }

    #[test]
    fn failed_statuses_are_suspected_before_wrong_sizes() {
        use nvcomp_sys::nvcompStatus_t as S;
        let jobs = [job(100); 4];
        // Issue 20: job 1's status failed, no size written, the other statuses the zero fill.
        let zero = outcome(S::nvcompSuccess, 0);
        let outcomes = [zero, outcome(S::nvcompErrorCannotDecompress, 0), zero, zero];
        assert_eq!(suspect_jobs(&outcomes, &jobs), [1]);
        // Every status failed: every job.
        let failed = [outcome(S::nvcompErrorCannotDecompress, 0); 4];
        assert_eq!(suspect_jobs(&failed, &jobs), [0, 1, 2, 3]);
        // No status failed: the wrong sizes.
        let sizes = [
            outcome(S::nvcompSuccess, 100),
            outcome(S::nvcompSuccess, 40),
            outcome(S::nvcompSuccess, 100),
            zero,
        ];
        assert_eq!(suspect_jobs(&sizes, &jobs), [1, 3]);
        let good = [outcome(S::nvcompSuccess, 100); 4];
        assert!(suspect_jobs(&good, &jobs).is_empty());
    }

    #[test]
    fn chunk_lists_are_bounded() {
        let offsets: Vec<Vec<u64>> = (0..10).map(|k| vec![k * 25]).collect();
        let refs: Vec<&[u64]> = offsets.iter().map(|o| o.as_slice()).collect();
        assert_eq!(chunk_list(&refs[..3]), "[0], [25], [50]");
        assert_eq!(
            chunk_list(&refs),
            "[0], [25], [50], [75], [100], [125], [150], [175], and 2 more"
        );
    }
}
