//! One stored chunk a read needs, decoded once, and each selection's part of it copied into
//! place in the output.

use super::slot::Slot;
use super::{Decoding, Placed, StoredChunk};
use crate::place::{copy_box, strides, whole_chunk_run, ChunkPart, SharedOut, Source};

/// One stored chunk a read needs, and every selected part inside it (the selection's position
/// in the read's list, and the part).
pub(super) struct Job {
    pub(super) offset: Vec<u64>,
    pub(super) stored: StoredChunk,
    pub(super) parts: Vec<(usize, ChunkPart)>,
}

impl Decoding<'_> {
    pub(super) fn chunk_bytes(&self) -> usize {
        self.chunk.iter().product::<u64>() as usize * self.element_size
    }

    /// The bytes of the decoded chunk up to the last element the job's parts take (the last
    /// element of each part's box is its furthest in row-major order).
    fn bytes_needed(&self, job: &Job, selections: &[Placed]) -> usize {
        let rank = self.chunk.len();
        let strides = strides(self.chunk);
        let last = job.parts.iter().map(|(k, part)| {
            let sel = &selections[*k].selection;
            (0..rank)
                .map(|a| {
                    let first = sel.start[a] + part.first[a] * sel.step[a] - job.offset[a];
                    (first + (part.count[a] - 1) * sel.step[a]) * strides[a]
                })
                .sum::<u64>()
        });
        last.max()
            .map_or(0, |e| (e as usize + 1) * self.element_size)
    }

    /// Where in the output (a byte offset) a chunk's stored bytes may be read straight to: they
    /// are its decoded bytes (`Pipeline::stores_plain`, all of them), and the chunk is one
    /// selection's only part and fills a run of it. Saves the copy out of the read buffer.
    pub(super) fn plain_run(&self, job: &Job, selections: &[Placed]) -> Option<u64> {
        if !self.pipeline.stores_plain(job.stored.mask) || job.stored.size != self.chunk_bytes() {
            return None;
        }
        let [(k, part)] = job.parts.as_slice() else {
            return None;
        };
        let placed = &selections[*k];
        whole_chunk_run(part, &placed.selection, self.chunk)
            .map(|run| placed.at + run * self.element_size as u64)
    }

    /// Reads a chunk's stored bytes from `file` straight into the output at `at` (see
    /// [`Decoding::plain_run`]).
    ///
    /// # Safety
    /// As [`Decoding::decode_job`]'s: the chunk's run at `at` lies inside the output, and no
    /// other thread writes it.
    pub(super) unsafe fn read_plain(
        &self,
        file: &std::fs::File,
        job: &Job,
        at: u64,
        out: SharedOut,
    ) -> Result<(), String> {
        // SAFETY: the run lies inside the output and is this task's alone, as the caller
        // guarantees.
        let dest = unsafe { std::slice::from_raw_parts_mut(out.at(at), self.chunk_bytes()) };
        super::read_stored_at(file, job.stored.address, dest)
    }

    /// Decodes one chunk, once, and copies each of its parts into the output: straight into
    /// the output where the chunk is one selection's only part and fills a run of it.
    ///
    /// # Safety
    /// `out` must hold every selection at its place, and no other thread may write the parts'
    /// elements.
    pub(super) unsafe fn decode_job(
        &self,
        job: &Job,
        selections: &[Placed],
        mask: u32,
        slot: &mut Slot,
        out: SharedOut,
    ) -> Result<(), String> {
        if let [(k, part)] = job.parts.as_slice() {
            let placed = &selections[*k];
            if let Some(run) = whole_chunk_run(part, &placed.selection, self.chunk) {
                let at = placed.at + run * self.element_size as u64;
                // SAFETY: the chunk's run lies inside the selection's place in the output, which
                // only this task writes, as the caller guarantees.
                let dest =
                    unsafe { std::slice::from_raw_parts_mut(out.at(at), self.chunk_bytes()) };
                return self
                    .pipeline
                    .decode_into(&slot.stored, mask, &mut slot.scratch, dest);
            }
        }
        // Parts that end early in a chunk whose first bytes decode alone (rows near its start):
        // decoding stops after the last byte they need.
        let chunk_bytes = self.chunk_bytes();
        let needed = self.bytes_needed(job, selections);
        let decoded = if self.pipeline.prefix_pays(mask, needed, chunk_bytes) {
            self.pipeline.decode_prefix(
                &slot.stored,
                mask,
                chunk_bytes,
                needed,
                &mut slot.scratch,
            )?
        } else {
            self.pipeline
                .decode(&slot.stored, mask, chunk_bytes, &mut slot.scratch)?
        };
        for (k, part) in &job.parts {
            let placed = &selections[*k];
            let start: Vec<u64> = part
                .file_start(&placed.selection)
                .iter()
                .zip(&job.offset)
                .map(|(s, o)| s - o)
                .collect();
            let src = Source {
                bytes: decoded,
                shape: self.chunk,
                start: &start,
                step: placed.selection.step,
            };
            // SAFETY: as the caller guarantees; the part lies inside its selection, which lies
            // at its place in the output.
            unsafe {
                copy_box(
                    &src,
                    out.at(placed.at),
                    placed.selection.count,
                    &part.first,
                    &part.count,
                    self.element_size,
                )
            };
        }
        Ok(())
    }
}
