//! The fixed array of chunks (what HDF5 makes for a chunked dataset of fixed size in a file of
//! `libver="latest"`) fetched ahead of HDF5's walk, as `index_ea` does for extensible arrays:
//! during a walk of the index, once HDF5 reads the array's header (or its data block, whose
//! header the block cache holds), the data block's pages that no cached block holds are fetched
//! at once, in GETs of whole pages all in flight together, and kept with the other index nodes.
//! Unaided, HDF5 reads the pages one after another (`H5FA_get` per chunk, a page at a time), so a
//! data block larger than the block cache's block costs a round trip per block, in sequence (a
//! dataset of 100,000 chunks: 1.4 MB of pages, 6 round trips).
//!
//! The layout, from HDF5's file format specification (and `H5FAcache.c`, `H5FApkg.h`): the
//! header `FAHD`, version 0, the client (0: chunks, 1: filtered chunks), the element's size, the
//! bits of a page's elements, the elements in all (a length), the data block's address, a
//! checksum. The data block `FADB`: version, client, the header's address, then, where the array
//! has more elements than a page holds, a bit per page (pages made) and the prefix's checksum,
//! the pages following it, each its elements and a checksum (the last page shorter); otherwise
//! the elements and a checksum. Only 8-byte addresses and lengths are read (the superblock says
//! the file's: `RemoteFile::sizes_are_8`); a block that does not parse is only not prefetched for,
//! and every byte kept is the object's own at its address, so a wrong guess costs requests, never
//! bytes.

use super::RemoteFile;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

/// Signature, version, client, element size, page bits, elements, data block address, checksum.
const HEADER_LEN: usize = 4 + 4 + 8 + 8 + 4;
/// The data block's signature, version, client, header address and prefix checksum.
const PREFIX: usize = 4 + 1 + 1 + 8 + 4;
/// Bytes of pages fetched by one GET: whole pages, up to this (the pages of one array go in
/// flight together, `index_nodes::NODES_IN_FLIGHT` times `H5GDS_REMOTE_IN_FLIGHT` at once).
const PAGES_PER_GET: u64 = 1 << 20;

/// A fixed array of chunks, as its header describes it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Array {
    /// The header's address.
    at: u64,
    client: u8,
    element: u64,
    page_elements: u64,
    elements: u64,
    /// The data block's address.
    block: u64,
}

/// The array whose header is `bytes` (from its start) at `at` in an object of `size` bytes,
/// where it is a fixed array of chunks whose data block is made; `None` otherwise.
pub(super) fn chunk_array(at: u64, bytes: &[u8], size: u64) -> Option<Array> {
    if bytes.len() < HEADER_LEN || &bytes[..4] != b"FAHD" || bytes[4] != 0 || bytes[5] > 1 {
        return None;
    }
    let (element, page_bits) = (bytes[6] as u64, bytes[7]);
    let elements = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let block = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    let array = Array {
        at,
        client: bytes[5],
        element,
        page_elements: 1u64.checked_shl(page_bits as u32)?,
        elements,
        block,
    };
    let plausible = element >= 8
        && page_bits <= 32
        && elements > 0
        && block != 0
        && block != u64::MAX
        && block < size
        && array.block_len().is_some_and(|len| block + len <= size);
    plausible.then_some(array)
}

impl Array {
    /// Pages of the data block (0: not paged).
    fn pages(&self) -> u64 {
        if self.elements > self.page_elements {
            self.elements.div_ceil(self.page_elements)
        } else {
            0
        }
    }

    /// Bytes of the data block's prefix (HDF5's first read of it; all of it where not paged).
    fn prefix_len(&self) -> u64 {
        PREFIX as u64 + self.pages().div_ceil(8)
    }

    /// The data block's pieces as HDF5 reads them, each as its byte range in the file: its
    /// prefix, then its pages; none where not paged (HDF5 reads it whole, through the cache).
    fn pieces(&self) -> Vec<Range<u64>> {
        let full = self.page_elements * self.element + 4;
        let first = self.block + self.prefix_len();
        let pages = (0..self.pages()).map(|p| {
            let held = (self.elements - p * self.page_elements).min(self.page_elements);
            let start = first + p * full;
            start..start + held * self.element + 4
        });
        match self.pages() {
            0 => Vec::new(),
            _ => std::iter::once(self.block..first).chain(pages).collect(),
        }
    }

    /// Bytes of the whole data block (its pages included).
    fn block_len(&self) -> Option<u64> {
        let elements = self.elements.checked_mul(self.element)?;
        elements
            .checked_add(self.prefix_len())?
            .checked_add(4 * self.pages())
    }

    /// The GETs of the pieces (prefix, pages) not already held (`held`): runs of neighbouring
    /// pieces, each GET whole pieces up to [`PAGES_PER_GET`] bytes (one where a page is larger).
    fn page_gets(&self, held: impl Fn(&Range<u64>) -> bool) -> Vec<Range<u64>> {
        let mut gets: Vec<Range<u64>> = Vec::new();
        for page in self.pieces().into_iter().filter(|p| !held(p)) {
            match gets.last_mut() {
                Some(get) if get.end == page.start && page.end - get.start <= PAGES_PER_GET => {
                    get.end = page.end
                }
                _ => gets.push(page),
            }
        }
        gets
    }
}

impl RemoteFile {
    /// After HDF5 read `bytes` at `addr` during a walk of an index: where they are the header of
    /// a fixed array of chunks, or (once a walk) its data block's prefix, whose header the block
    /// cache holds, fetches the data block's pages ahead. Whether `bytes` were a fixed array's.
    pub(super) fn fetch_fixed_array(&self, addr: u64, bytes: &[u8]) -> bool {
        let array = match bytes.get(..4) {
            Some(b"FAHD") => chunk_array(addr, bytes, self.size),
            Some(b"FADB") => {
                if self.index_searched.swap(true, Relaxed) {
                    return true;
                }
                let Some(header) = bytes.get(6..14) else {
                    return true;
                };
                let header = u64::from_le_bytes(header.try_into().expect("8 bytes"));
                self.cached_headers(b"FAHD", |h| chunk_array(header, h, self.size))
                    .into_iter()
                    .find(|a| a.block == addr && bytes[5] == a.client)
            }
            _ => return false,
        };
        if let Some(array) = array {
            let gets =
                array.page_gets(|p| self.held(p.start, (p.end - p.start) as usize).is_some());
            let total: u64 = gets.iter().map(|r| r.end - r.start).sum();
            if total <= super::index_nodes::KEPT_BYTES as u64 {
                self.fetch_kept(&gets);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as HDF5 writes one for filtered chunks of `element`-byte entries, `elements` of
    /// them, 2^`page_bits` a page, the data block at `block`.
    fn header(element: u8, page_bits: u8, elements: u64, block: u64) -> Vec<u8> {
        let mut h = b"FAHD".to_vec();
        h.extend([0, 1, element, page_bits]);
        h.extend(elements.to_le_bytes());
        h.extend(block.to_le_bytes());
        h.extend([0; 4]);
        h
    }

    #[test]
    fn the_pages_of_a_fixed_array_lie_as_hdf5_lays_them() {
        // 2,500 filtered chunks of 14-byte entries, 1,024 a page: 3 pages, the last of 452.
        let a = chunk_array(7_000, &header(14, 10, 2_500, 10_000), 1 << 30).unwrap();
        assert_eq!((a.pages(), a.prefix_len()), (3, 18 + 1));
        let page = 1_024 * 14 + 4;
        let first = 10_000 + 19;
        assert_eq!(
            a.pieces(),
            [
                10_000..first,
                first..first + page,
                first + page..first + 2 * page,
                first + 2 * page..first + 2 * page + 452 * 14 + 4
            ]
        );
        assert_eq!(a.block_len(), Some(19 + 2_500 * 14 + 3 * 4));
        // None held: one GET (under 1 MiB); the prefix and first page held: the other two.
        assert_eq!(
            a.page_gets(|_| false),
            vec![10_000..first + 2 * page + 452 * 14 + 4]
        );
        assert_eq!(
            a.page_gets(|p| p.start < first + page),
            vec![first + page..first + 2 * page + 452 * 14 + 4]
        );
        // Many pages: GETs of whole pages, none over 1 MiB.
        let big = chunk_array(7_000, &header(14, 10, 400_000, 10_000), 1 << 30).unwrap();
        let gets = big.page_gets(|_| false);
        assert!(gets.len() > 1 && gets.iter().all(|g| g.end - g.start <= PAGES_PER_GET));
        assert_eq!(gets.first().unwrap().start, 10_000);
        assert_eq!(gets.last().unwrap().end, 10_000 + big.block_len().unwrap());
        assert!(gets.windows(2).all(|w| w[0].end == w[1].start));
        // Not paged: nothing beyond the prefix HDF5 reads whole.
        let small = chunk_array(7_000, &header(14, 10, 600, 10_000), 1 << 30).unwrap();
        assert_eq!((small.pages(), small.page_gets(|_| false).len()), (0, 0));
    }

    #[test]
    fn other_blocks_are_not_fixed_arrays() {
        let size = 1 << 20;
        // The data block past the object's end, undefined, another signature, a short one.
        assert_eq!(chunk_array(0, &header(14, 10, 2_500, size), size), None);
        assert_eq!(chunk_array(0, &header(14, 10, 2_500, u64::MAX), size), None);
        assert_eq!(
            chunk_array(0, &header(14, 10, 100_000, size - 100), size),
            None
        );
        let mut other = header(14, 10, 2_500, 10_000);
        other[..4].copy_from_slice(b"EAHD");
        assert_eq!(chunk_array(0, &other, size), None);
        assert_eq!(chunk_array(0, b"FAHD\0\x01", size), None);
    }
}
