//! The version 2 B-tree of chunks (what HDF5 makes for a chunked dataset of several unlimited
//! axes in a file of `libver="latest"`) listed in as few round trips as its depth, as
//! `index_nodes` does for the version 1 B-tree: during a walk of the index, once HDF5 reads the
//! tree's header (or a node of it, whose header the block cache holds), every node below the
//! root is fetched a level at a time, each level's nodes all in flight together, as exactly the
//! nodes' bytes (the tree's nodes are all `node size` bytes), and kept with the version 1 nodes.
//!
//! The layout, from HDF5's file format specification (and `H5B2cache.c`, `H5B2hdr.c`):
//! - header: `BTHD`, version 0, the record type (10: chunks, 11: filtered chunks), node size (4
//!   bytes), record size (2), depth (2), split and merge percentages (1 each), the root's address,
//!   its number of records (2), the tree's number of records (8), a checksum;
//! - internal node: `BTIN`, version, type, its records (`record size` each), then one pointer
//!   more than records: the child's address, its number of records (in as few bytes as hold a
//!   leaf's most), and, below depth 1, the number of records under it (in as few bytes as hold
//!   the most a child at that depth can have under it); a checksum;
//! - leaf: `BTLF`, version, type, records, checksum (nothing below it).
//!
//! Only addresses of 8 bytes are read (HDF5's default); a node that does not parse is only not
//! prefetched for: HDF5 reads it as before. Every byte kept is the object's own at its address
//! (the version opened), so a wrong guess costs requests, never bytes.

use super::RemoteFile;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

/// Signature, version, type and checksum: the bytes of a node that are not records or pointers.
const PREFIX: usize = 4 + 1 + 1 + 4;
/// The header's bytes with 8-byte addresses and lengths.
const HEADER_LEN: usize = PREFIX + 4 + 2 + 2 + 1 + 1 + 8 + 2 + 8;
/// The deepest tree prefetched for (a tree of 2 KiB nodes this deep holds far more records than
/// any dataset has chunks).
const MAX_DEPTH: u16 = 12;

/// Bytes needed to write numbers up to `limit` (HDF5's `H5VM_limit_enc_size`).
fn size_for(limit: u64) -> usize {
    (63 - limit.max(1).leading_zeros() as usize) / 8 + 1
}

/// A v2 B-tree of chunks, as its header describes it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tree {
    record_type: u8,
    node_size: usize,
    record_size: usize,
    depth: u16,
    root: u64,
    root_records: usize,
    /// Bytes of a pointer's "records in the child" field.
    records_size: usize,
    /// Per depth, bytes of the "records under the child" field of a pointer to a node there.
    under_size: Vec<usize>,
}

/// The tree whose header is `bytes` (from its start) in an object of `size` bytes, where it is
/// a v2 B-tree of chunks with an internal root (a tree of a single leaf has nothing to fetch
/// ahead); `None` otherwise.
pub(super) fn chunk_tree(bytes: &[u8], size: u64) -> Option<Tree> {
    if bytes.len() < HEADER_LEN || &bytes[..4] != b"BTHD" || bytes[4] != 0 {
        return None;
    }
    let record_type = bytes[5];
    if record_type != 10 && record_type != 11 {
        return None;
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let node_size = u32::from_le_bytes(bytes[6..10].try_into().ok()?) as usize;
    let record_size = u16_at(10) as usize;
    let depth = u16_at(12);
    let root = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    let root_records = u16_at(24) as usize;
    if !(64..=1 << 20).contains(&node_size)
        || record_size == 0
        || record_size > node_size
        || depth == 0
        || depth > MAX_DEPTH
        || root == 0
        || root >= size
        || root_records == 0
    {
        return None;
    }
    // As H5B2__hdr_init sizes them: a leaf's most records, then per depth an internal node's
    // most and the most under it.
    let leaf_most = ((node_size - PREFIX) / record_size) as u64;
    let records_size = size_for(leaf_most);
    let mut under_size = vec![0usize];
    let mut under_most = leaf_most;
    for d in 1..=depth as usize {
        let pointer = 8 + records_size + under_size[d - 1];
        let most = node_size.checked_sub(PREFIX + pointer)? / (record_size + pointer);
        under_most = (most as u64 + 1)
            .saturating_mul(under_most)
            .saturating_add(most as u64);
        under_size.push(size_for(under_most));
    }
    Some(Tree {
        record_type,
        node_size,
        record_size,
        depth,
        root,
        root_records,
        records_size,
        under_size,
    })
}

impl Tree {
    /// The children (address, number of records) of `node`, an internal node at `depth` (1:
    /// its children are leaves) holding `records` records, inside an object of `size` bytes;
    /// `None` where it is not one.
    fn children(
        &self,
        node: &[u8],
        depth: u16,
        records: usize,
        size: u64,
    ) -> Option<Vec<(u64, usize)>> {
        if node.len() < PREFIX
            || &node[..4] != b"BTIN"
            || node[4] != 0
            || node[5] != self.record_type
            || depth == 0
        {
            return None;
        }
        let under = if depth > 1 {
            self.under_size[depth as usize - 1]
        } else {
            0
        };
        let pointer = 8 + self.records_size + under;
        let mut at = 6 + records * self.record_size;
        if at + (records + 1) * pointer + 4 > node.len() {
            return None;
        }
        let mut children = Vec::with_capacity(records + 1);
        for _ in 0..=records {
            let addr = u64::from_le_bytes(node[at..at + 8].try_into().ok()?);
            let mut count = 0u64;
            for (i, b) in node[at + 8..at + 8 + self.records_size].iter().enumerate() {
                count |= u64::from(*b) << (8 * i);
            }
            if addr == 0 || addr >= size || count == 0 {
                return None;
            }
            children.push((addr, count as usize));
            at += pointer;
        }
        Some(children)
    }
}

impl RemoteFile {
    /// After HDF5 read `bytes` at `addr` during a walk of an index: where they are the header of
    /// a v2 B-tree of chunks, or (once a walk) a node of one whose header the block cache
    /// holds, fetches the tree's nodes below its root a level at a time. Whether `bytes` were
    /// a v2 B-tree's (header or node): the caller then looks no further.
    pub(super) fn fetch_v2_tree(&self, addr: u64, bytes: &[u8]) -> bool {
        let tree = match bytes.get(..4) {
            Some(b"BTHD") => chunk_tree(bytes, self.size),
            Some(b"BTIN" | b"BTLF") => {
                if self.index_searched.swap(true, Relaxed) {
                    return true;
                }
                self.cached_tree_holding(addr)
            }
            _ => return false,
        };
        if let Some(tree) = tree {
            self.fetch_tree_levels(&tree);
        }
        true
    }

    /// The tree of chunks, among the headers the block cache holds, whose root is at `addr` or
    /// has the node at `addr` among its children.
    fn cached_tree_holding(&self, addr: u64) -> Option<Tree> {
        let trees = self.cached_headers(b"BTHD", |at| chunk_tree(at, self.size));
        trees.into_iter().find(|t| {
            t.root == addr
                || self.held(t.root, t.node_size).is_some_and(|root| {
                    t.children(&root, t.depth, t.root_records, self.size)
                        .is_some_and(|c| c.iter().any(|&(a, _)| a == addr))
                })
        })
    }

    /// Fetches the nodes of `tree` below its root (the root too, where this file holds it not),
    /// a level at a time, each level's nodes in flight together; they are kept for HDF5's reads.
    /// A failed fetch is only logged (HDF5's own read then asks again and reports it).
    fn fetch_tree_levels(&self, tree: &Tree) {
        let len = tree.node_size;
        let fetch = |ranges: &[Range<u64>]| self.fetch_kept(ranges);
        let node_range = |a: u64| self.node_range(a, len);
        let root = match self.held(tree.root, len) {
            Some(root) => root,
            None => match fetch(&[node_range(tree.root)]) {
                Some(mut nodes) if nodes.len() == 1 => nodes.remove(0),
                _ => return,
            },
        };
        // (node bytes, its records) of the level at `depth`.
        let mut level = vec![(root, tree.root_records)];
        let mut fetched = 0usize;
        for depth in (1..=tree.depth).rev() {
            let mut below: Vec<(u64, usize)> = level
                .iter()
                .filter_map(|(node, records)| tree.children(node, depth, *records, self.size))
                .flatten()
                .collect();
            below.sort_unstable();
            below.dedup_by_key(|(a, _)| *a);
            let (held, missing): (Vec<_>, Vec<_>) = below
                .into_iter()
                .map(|(a, records)| (a, records, self.held(a, len)))
                .partition(|(_, _, bytes)| bytes.is_some());
            let ranges: Vec<Range<u64>> = missing.iter().map(|&(a, _, _)| node_range(a)).collect();
            fetched += ranges.len() * len;
            if fetched > super::index_nodes::KEPT_BYTES {
                return;
            }
            let Some(nodes) = fetch(&ranges) else {
                return;
            };
            level = held
                .into_iter()
                .filter_map(|(_, records, bytes)| bytes.map(|b| (b, records)))
                .chain(nodes.into_iter().zip(missing.iter().map(|&(_, r, _)| r)))
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header of a tree of chunks (filtered: type 11) of 2 KiB nodes and 31-byte records.
    fn header(depth: u16, root: u64, root_records: u16) -> Vec<u8> {
        let mut h = b"BTHD".to_vec();
        h.extend([0, 11]);
        h.extend(2048u32.to_le_bytes());
        h.extend(31u16.to_le_bytes());
        h.extend(depth.to_le_bytes());
        h.extend([100, 40]);
        h.extend(root.to_le_bytes());
        h.extend(root_records.to_le_bytes());
        h.extend(1000u64.to_le_bytes());
        h.extend([0; 4]);
        h
    }

    /// An internal node of `tree` at `depth` with `records` records and these children.
    fn internal(tree: &Tree, depth: u16, children: &[(u64, usize)]) -> Vec<u8> {
        let mut n = b"BTIN".to_vec();
        n.extend([0, tree.record_type]);
        n.resize(6 + (children.len() - 1) * tree.record_size, 0xAB);
        for &(addr, records) in children {
            n.extend(addr.to_le_bytes());
            n.extend(&(records as u64).to_le_bytes()[..tree.records_size]);
            if depth > 1 {
                n.extend(&[1u8; 8][..tree.under_size[depth as usize - 1]]);
            }
        }
        n.resize(tree.node_size, 0);
        n
    }

    #[test]
    fn field_sizes_are_hdf5s() {
        assert_eq!(size_for(0), 1);
        assert_eq!(size_for(255), 1);
        assert_eq!(size_for(256), 2);
        assert_eq!(size_for(65_535), 2);
        assert_eq!(size_for(65_536), 3);
        let tree = chunk_tree(&header(2, 9_000, 3), 1 << 30).unwrap();
        // A leaf holds (2048 - 10) / 31 = 65 records: one byte counts them. Depth 1: pointers of
        // 9 bytes, (2048 - 19) / 40 = 50 records, 50 + 51 * 65 = 3365 under: two bytes.
        assert_eq!(
            (tree.records_size, tree.under_size.clone()),
            (1, vec![0, 2, 3])
        );
    }

    #[test]
    fn the_children_of_internal_nodes_are_read_at_each_depth() {
        let size = 1 << 30;
        for depth in [1u16, 2] {
            let tree = chunk_tree(&header(depth, 9_000, 3), size).unwrap();
            let children = [(5_000, 60), (90_000, 65), (1_000_000, 33), (7_777_777, 64)];
            let node = internal(&tree, depth, &children);
            assert_eq!(
                tree.children(&node, depth, 3, size),
                Some(children.to_vec()),
                "depth {depth}"
            );
            // A child past the object's end, another signature, a leaf: none.
            assert_eq!(tree.children(&node, depth, 3, 6_000_000), None);
            let mut leaf = node.clone();
            leaf[..4].copy_from_slice(b"BTLF");
            assert_eq!(tree.children(&leaf, depth, 3, size), None);
        }
    }

    #[test]
    fn headers_of_other_trees_are_not_chunk_trees() {
        let size = 1 << 30;
        let mut other = header(1, 9_000, 3);
        other[5] = 1; // a tree of another record type (a group's names)
        assert_eq!(chunk_tree(&other, size), None);
        // A single leaf (depth 0), a root outside the object, too short.
        assert_eq!(chunk_tree(&header(0, 9_000, 3), size), None);
        assert_eq!(chunk_tree(&header(1, size + 1, 3), size), None);
        assert_eq!(chunk_tree(&header(1, 9_000, 3)[..20], size), None);
        assert!(chunk_tree(&header(1, 9_000, 3), size).is_some());
    }
}
