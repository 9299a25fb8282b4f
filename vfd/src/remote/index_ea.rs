//! The extensible array of chunks (what HDF5 makes for a chunked dataset of one unlimited axis
//! in a file of `libver="latest"`) fetched in as few round trips as its depth, as `index_nodes`
//! does for the version 1 B-tree: during a walk of the index, once HDF5 reads the array's header
//! (or one of its blocks, whose header the block cache holds), its index block is read, then its
//! data blocks and super blocks are fetched together, then the super blocks' data blocks, each
//! as exactly its bytes, kept with the other index nodes. Unaided, each data block is a
//! block-cache miss and a round trip of its own, one after another (they lie between the chunks,
//! made as the array grew).
//!
//! The layout, from HDF5's file format specification (and `H5EAcache.c`, `H5EAhdr.c`): the
//! header `EAHD`, version 0, the client (0: chunks, 1: filtered chunks), the element's size, the
//! bits of the most elements, the elements in the index block, the least elements of a data
//! block, the least data block addresses of a super block, the bits of a data block page's
//! elements, six lengths (statistics), the index block's address, a checksum. Super block `u`
//! has `2^(u/2)` data blocks of `2^((u+1)/2)` times the least elements each; the index block
//! holds the first super blocks' data block addresses (`2 * (least - 1)` of them), then the
//! addresses of the other super blocks. Only 8-byte addresses and lengths are read; a block that
//! does not parse is only not prefetched for, and every byte kept is the object's own at its
//! address, so a wrong guess costs requests, never bytes.

use super::RemoteFile;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

/// Signature, version, client and checksum.
const PREFIX: usize = 4 + 1 + 1 + 4;
/// The header's bytes with 8-byte addresses and lengths.
const HEADER_LEN: usize = PREFIX + 6 + 6 * 8 + 8;
/// An undefined address.
const UNDEFINED: u64 = u64::MAX;

/// An extensible array of chunks, as its header describes it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Array {
    client: u8,
    element: usize,
    index_elements: usize,
    least_elements: u64,
    least_pointers: u64,
    page_elements: u64,
    /// Bytes of a block's offset in the array.
    offset_size: usize,
    /// Super blocks in all.
    super_blocks: usize,
    /// The index block's address.
    index: u64,
}

/// The array whose header is `bytes` (from its start) in an object of `size` bytes, where it is
/// an extensible array of chunks with an index block; `None` otherwise.
pub(super) fn chunk_array(bytes: &[u8], size: u64) -> Option<Array> {
    if bytes.len() < HEADER_LEN || &bytes[..4] != b"EAHD" || bytes[4] != 0 || bytes[5] > 1 {
        return None;
    }
    let [element, most_bits, index_elements, least_elements, least_pointers, page_bits] =
        <[u8; 6]>::try_from(&bytes[6..12]).ok()?;
    let index = u64::from_le_bytes(bytes[60..68].try_into().ok()?);
    let pow2 = |v: u8| v.is_power_of_two();
    if element < 8
        || !(1..=64).contains(&most_bits)
        || !pow2(least_elements)
        || !pow2(least_pointers)
        || least_pointers < 2
        || page_bits > 32
        || index == 0
        || index >= size
    {
        return None;
    }
    let least_log = least_elements.trailing_zeros() as usize;
    let super_blocks = (1 + most_bits as usize).checked_sub(least_log)?;
    Some(Array {
        client: bytes[5],
        element: element as usize,
        index_elements: index_elements as usize,
        least_elements: least_elements as u64,
        least_pointers: least_pointers as u64,
        page_elements: 1 << page_bits,
        offset_size: (most_bits as usize).div_ceil(8),
        super_blocks,
        index,
    })
}

impl Array {
    /// Data blocks of super block `u`, and elements in each.
    fn super_block(&self, u: usize) -> (u64, u64) {
        (1 << (u / 2), (1 << u.div_ceil(2)) * self.least_elements)
    }

    /// Super blocks whose data blocks the index block addresses itself.
    fn index_super_blocks(&self) -> usize {
        2 * self.least_pointers.trailing_zeros() as usize
    }

    /// Bytes of a data block of `elements` elements (its pages' checksums included).
    fn data_block_len(&self, elements: u64) -> usize {
        let pages = if elements > self.page_elements {
            (elements / self.page_elements) as usize
        } else {
            0
        };
        PREFIX + 8 + self.offset_size + elements as usize * self.element + 4 * pages
    }

    /// Bytes of a data block's "page initialised" bits in a super block of data blocks of
    /// `elements` elements.
    fn page_bits_len(&self, elements: u64) -> usize {
        if elements > self.page_elements {
            (elements / self.page_elements).div_ceil(8) as usize
        } else {
            0
        }
    }

    /// Bytes of super block `u`.
    fn super_block_len(&self, u: usize) -> usize {
        let (blocks, elements) = self.super_block(u);
        PREFIX + 8 + self.offset_size + blocks as usize * (self.page_bits_len(elements) + 8)
    }

    /// Bytes of the index block.
    fn index_len(&self) -> usize {
        let data = 2 * (self.least_pointers as usize - 1);
        let supers = self.super_blocks.saturating_sub(self.index_super_blocks());
        PREFIX + 8 + self.index_elements * self.element + 8 * (data + supers)
    }

    /// The 8-byte addresses at `at` in `block`, one for each of `what`, paired with it; those
    /// undefined or outside the object left out.
    fn addresses<T: Copy>(
        block: &[u8],
        at: usize,
        what: impl Iterator<Item = T>,
        size: u64,
    ) -> Vec<(u64, T)> {
        what.enumerate()
            .filter_map(|(i, w)| {
                let a = u64::from_le_bytes(block.get(at + 8 * i..at + 8 * i + 8)?.try_into().ok()?);
                (a != UNDEFINED && a != 0 && a < size).then_some((a, w))
            })
            .collect()
    }

    /// The blocks the index block `block` addresses: (address, bytes, `Some(u)` for super block
    /// `u`, `None` for a data block).
    fn below_index(&self, block: &[u8], size: u64) -> Option<Vec<(u64, usize, Option<usize>)>> {
        if block.len() < self.index_len() || &block[..4] != b"EAIB" || block[5] != self.client {
            return None;
        }
        let first = self.index_super_blocks();
        let data_lens = (0..first).flat_map(|u| {
            let (blocks, elements) = self.super_block(u);
            std::iter::repeat_n(self.data_block_len(elements), blocks as usize)
        });
        let data_lens: Vec<usize> = data_lens
            .take(2 * (self.least_pointers as usize - 1))
            .collect();
        let at = 6 + 8 + self.index_elements * self.element;
        let mut out: Vec<_> = Self::addresses(block, at, data_lens.iter().copied(), size)
            .into_iter()
            .map(|(a, len)| (a, len, None))
            .collect();
        let at = at + 8 * data_lens.len();
        out.extend(
            Self::addresses(block, at, first..self.super_blocks, size)
                .into_iter()
                .map(|(a, u)| (a, self.super_block_len(u), Some(u))),
        );
        Some(out)
    }

    /// The data blocks (address, bytes) super block `u`'s `block` addresses.
    fn below_super(&self, block: &[u8], u: usize, size: u64) -> Option<Vec<(u64, usize)>> {
        if block.len() < self.super_block_len(u) || &block[..4] != b"EASB" {
            return None;
        }
        let (blocks, elements) = self.super_block(u);
        let at = 6 + 8 + self.offset_size + blocks as usize * self.page_bits_len(elements);
        let len = self.data_block_len(elements);
        Some(
            Self::addresses(block, at, 0..blocks as usize, size)
                .into_iter()
                .map(|(a, _)| (a, len))
                .collect(),
        )
    }
}

impl RemoteFile {
    /// After HDF5 read `bytes` at `addr` during a walk of an index: where they are the header of
    /// an extensible array of chunks, or (once a walk) a block of one whose header the block
    /// cache holds, fetches its blocks ahead. Whether `bytes` were an extensible array's.
    pub(super) fn fetch_extensible_array(&self, addr: u64, bytes: &[u8]) -> bool {
        let array = match bytes.get(..4) {
            Some(b"EAHD") => chunk_array(bytes, self.size),
            Some(b"EAIB" | b"EASB" | b"EADB") => {
                if self.index_searched.swap(true, Relaxed) {
                    return true;
                }
                self.cached_array_holding(addr)
            }
            _ => return false,
        };
        if let Some(array) = array {
            self.fetch_array_blocks(&array);
        }
        true
    }

    /// The array of chunks, among the headers the block cache holds, whose index block is at
    /// `addr` or addresses a block at `addr` (its index block held).
    fn cached_array_holding(&self, addr: u64) -> Option<Array> {
        let arrays = self.cached_headers(b"EAHD", |at| chunk_array(at, self.size));
        arrays.into_iter().find(|a| {
            a.index == addr
                || self.held(a.index, a.index_len()).is_some_and(|index| {
                    a.below_index(&index, self.size)
                        .is_some_and(|b| b.iter().any(|&(at, _, _)| at == addr))
                })
        })
    }

    /// Fetches `array`'s index block (where not held), then its data and super blocks
    /// together, then the super blocks' data blocks; they are kept for HDF5's reads. A failed
    /// fetch is only logged (HDF5's own read then asks again and reports it).
    fn fetch_array_blocks(&self, array: &Array) {
        let index_len = array.index_len();
        let index = match self.held(array.index, index_len) {
            Some(index) => index,
            None => match self.fetch_kept(&[self.node_range(array.index, index_len)]) {
                Some(mut got) if got.len() == 1 => got.remove(0),
                _ => return,
            },
        };
        let Some(below) = array.below_index(&index, self.size) else {
            return;
        };
        let (held, missing): (Vec<_>, Vec<_>) = below
            .into_iter()
            .map(|(a, len, u)| (a, len, u, self.held(a, len)))
            .partition(|(_, _, _, bytes)| bytes.is_some());
        let ranges: Vec<Range<u64>> = missing
            .iter()
            .map(|&(a, len, _, _)| self.node_range(a, len))
            .collect();
        if ranges.iter().map(|r| r.end - r.start).sum::<u64>()
            > super::index_nodes::KEPT_BYTES as u64
        {
            return;
        }
        let Some(got) = self.fetch_kept(&ranges) else {
            return;
        };
        // The super blocks, held or just fetched: their data blocks next.
        let supers = held
            .into_iter()
            .filter_map(|(_, _, u, bytes)| Some((u?, bytes?)))
            .chain(
                missing
                    .iter()
                    .zip(got)
                    .filter_map(|(&(_, _, u, _), bytes)| Some((u?, bytes))),
            );
        let data: Vec<(u64, usize)> = supers
            .filter_map(|(u, block)| array.below_super(&block, u, self.size))
            .flatten()
            .filter(|&(a, len)| self.held(a, len).is_none())
            .collect();
        let ranges: Vec<Range<u64>> = data
            .iter()
            .map(|&(a, len)| self.node_range(a, len))
            .collect();
        if ranges.iter().map(|r| r.end - r.start).sum::<u64>()
            <= super::index_nodes::KEPT_BYTES as u64
        {
            self.fetch_kept(&ranges);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as HDF5 writes one for filtered chunks (client 1) of `element`-byte elements,
    /// its index block at `index`.
    fn header(element: u8, index: u64) -> Vec<u8> {
        let mut h = b"EAHD".to_vec();
        h.extend([0, 1, element, 32, 4, 16, 4, 10]);
        h.resize(60, 0);
        h.extend(index.to_le_bytes());
        h.extend([0; 4]);
        h
    }

    #[test]
    fn the_blocks_of_hdf5s_chunk_arrays_are_sized_as_hdf5_sizes_them() {
        let a = chunk_array(&header(15, 5_000), 1 << 30).unwrap();
        // 32 bits of elements, 16 the least a data block: 29 super blocks, 4 of them addressed
        // by data block (6 data blocks: 1 of 16 elements, 1 of 32, 2 of 32, 2 of 64).
        assert_eq!(
            (a.super_blocks, a.index_super_blocks(), a.offset_size),
            (29, 4, 4)
        );
        assert_eq!(a.super_block(3), (2, 64));
        assert_eq!(a.super_block(4), (4, 64));
        // Index block: prefix 10, header address 8, 4 elements, 6 + 25 addresses.
        assert_eq!(a.index_len(), 10 + 8 + 4 * 15 + 8 * 31);
        // A data block of 64 elements: unpaged; of 2048: two pages, each with a checksum.
        assert_eq!(a.data_block_len(64), 10 + 8 + 4 + 64 * 15);
        assert_eq!(a.data_block_len(2048), 10 + 8 + 4 + 2048 * 15 + 8);
        // Super block 12: 64 data blocks of 1024 elements (unpaged); 14: 128 of 2048 (paged).
        assert_eq!(a.super_block_len(12), 10 + 8 + 4 + 64 * 8);
        assert_eq!(a.super_block_len(14), 10 + 8 + 4 + 128 * (1 + 8));
    }

    #[test]
    fn the_blocks_below_an_index_block_are_found() {
        let size = 1 << 30;
        let a = chunk_array(&header(15, 5_000), size).unwrap();
        let mut index = b"EAIB".to_vec();
        index.extend([0, 1]);
        index.extend(5_000u64.to_le_bytes()); // (the header's address)
        index.extend([7u8; 4 * 15]); // the elements held here
        let data = [
            100_000u64, 200_000, 300_000, UNDEFINED, UNDEFINED, UNDEFINED,
        ];
        for d in data {
            index.extend(d.to_le_bytes());
        }
        let mut supers = vec![UNDEFINED; 25];
        supers[0] = 900_000; // super block 4
        for s in supers {
            index.extend(s.to_le_bytes());
        }
        index.extend([0; 4]);
        let below = a.below_index(&index, size).unwrap();
        assert_eq!(
            below,
            [
                (100_000, a.data_block_len(16), None),
                (200_000, a.data_block_len(32), None),
                (300_000, a.data_block_len(32), None),
                (900_000, a.super_block_len(4), Some(4)),
            ]
        );
        // Super block 4: 4 data blocks of 64 elements, two of them made.
        let mut block = b"EASB".to_vec();
        block.extend([0, 1]);
        block.extend(5_000u64.to_le_bytes());
        block.extend(244u32.to_le_bytes());
        for d in [1_000_000u64, 1_100_000, UNDEFINED, UNDEFINED] {
            block.extend(d.to_le_bytes());
        }
        block.extend([0; 4]);
        assert_eq!(
            a.below_super(&block, 4, size),
            Some(vec![
                (1_000_000, a.data_block_len(64)),
                (1_100_000, a.data_block_len(64))
            ])
        );
        // Another signature, a header of another kind: nothing.
        assert_eq!(a.below_super(&index, 4, size), None);
        let mut other = header(15, 5_000);
        other[..4].copy_from_slice(b"FAHD");
        assert_eq!(chunk_array(&other, size), None);
    }
}
