//! The buffers a read decodes one chunk with (its stored bytes and the decoder's scratch),
//! reused from chunk to chunk and kept between reads within a budget.

use crate::pipeline::Scratch;
use std::sync::Mutex;

/// A stored chunk's buffer and the scratch that decodes it, reused from chunk to chunk.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) stored: Vec<u8>,
    pub(super) scratch: Scratch,
}

/// Slots kept between reads, at most [`KEPT_SLOT_BYTES`] in all: a read of large chunks would
/// otherwise fault in fresh pages for every chunk's buffers (32 MiB chunks: more time than
/// decoding some of them). Never waited for, so a forked child whose copy of the lock is held
/// takes fresh slots.
static KEPT_SLOTS: Mutex<Vec<Slot>> = Mutex::new(Vec::new());
const KEPT_SLOT_BYTES: usize = 256 << 20;

impl Slot {
    fn held_bytes(&self) -> usize {
        self.stored.capacity() + self.scratch.held_bytes()
    }

    /// A kept slot, or a new one.
    pub(super) fn take() -> Slot {
        KEPT_SLOTS
            .try_lock()
            .ok()
            .and_then(|mut kept| kept.pop())
            .unwrap_or_default()
    }

    /// Keeps the slot for the next read where the budget allows.
    pub(super) fn give_back(self) {
        if let Ok(mut kept) = KEPT_SLOTS.try_lock() {
            let held: usize = kept.iter().map(Slot::held_bytes).sum();
            if held + self.held_bytes() <= KEPT_SLOT_BYTES {
                kept.push(self);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_kept_between_reads_stay_within_their_budget() {
        // Slots of 100 MiB given back one after another: at most the budget is kept.
        for _ in 0..5 {
            let slot = Slot {
                stored: Vec::with_capacity(100 << 20),
                ..Slot::default()
            };
            slot.give_back();
            let kept = KEPT_SLOTS.lock().unwrap();
            let held: usize = kept.iter().map(Slot::held_bytes).sum();
            assert!(held <= KEPT_SLOT_BYTES, "{held} bytes kept");
        }
    }
}
