//! The chunk index of a remote file listed in as few round trips as its depth: while the engine
//! lists a dataset's chunk index through HDF5 (`H5Dchunk_iter`, [`RemoteFile::walking_index`]),
//! every node of a version 1 B-tree of chunks that HDF5 reads has its child nodes fetched at
//! once, all in flight together, and theirs in turn, one level at a time; HDF5's depth-first walk
//! then finds each node already here. Unaided, the walk costs a round trip per node, one after
//! another (a 256 MiB dataset of 256 KiB chunks: 19 nodes, 19 round trips in sequence).
//!
//! The nodes are kept as the exact byte ranges fetched (not as blocks of the block cache: they
//! lie megabytes apart, between the chunks), for the life of the open, so a later listing of the
//! same index costs no request. Their bytes are the object's at the version opened, like every
//! other request's (each GET conditional on the ETag). A node the parser does not recognise
//! (a layout it cannot make out) is only not prefetched: HDF5 reads it as before. The indexes of
//! `libver="latest"` files are fetched ahead by `index_v2` (version 2 B-trees) and `index_ea`
//! (extensible arrays), kept here with these nodes.
//!
//! A node, as HDF5's file format specification lays out a version 1 B-tree node: `TREE`, the node
//! type (1: chunks), its level (0: children are chunks), the entries used (2 bytes), the left and
//! right siblings' addresses, then key 0, child 0, key 1, ..., child N-1, key N; a chunk key is
//! the chunk's stored size (4 bytes), its filter mask (4) and its offset, 8 bytes for each of the
//! dataset's axes and one more (0, but in the last key, which bounds the node). The key's length, which the node
//! does not state, is the one rank for which every key and child is well formed.

use super::RemoteFile;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

/// Bytes of an address in the file (HDF5's default "size of offsets"; a file with other sizes
/// is not prefetched for).
const ADDRESS: usize = 8;
/// `TREE`, type, level, entries used, two sibling addresses.
const HEADER: usize = 4 + 1 + 1 + 2 + 2 * ADDRESS;
/// The most axes a dataset has in HDF5 (`H5S_MAX_RANK`).
const MAX_RANK: usize = 32;
/// Bytes of nodes kept per open file; beyond, the oldest go first.
pub(super) const KEPT_BYTES: usize = 32 << 20;
/// Nodes of one level in flight at once, as a multiple of `H5GDS_REMOTE_IN_FLIGHT`: a node is a
/// few KiB, so a level of more nodes than the setting (the 18 leaves of a 256 MiB dataset of
/// 256 KiB chunks, the 72 of 1 GiB) takes one round trip instead of one per `in_flight` nodes.
pub(super) const NODES_IN_FLIGHT: usize = 4;

/// The level and children of `node` (bytes from its start), where it is a version 1 B-tree node of
/// chunks inside an object of `size` bytes (level 0: its children are chunks; above: nodes);
/// `None` otherwise, or where its layout is ambiguous.
pub(super) fn chunk_node(node: &[u8], size: u64) -> Option<(u8, Vec<u64>)> {
    if node.len() < HEADER || &node[..4] != b"TREE" || node[4] != 1 {
        return None;
    }
    let entries = u16::from_le_bytes([node[6], node[7]]) as usize;
    if entries == 0 {
        return None;
    }
    let mut found = None;
    for axes in 2..=MAX_RANK + 1 {
        if let Some(children) = children_if(node, entries, axes, size) {
            if found.is_some() {
                return None; // two ranks fit: leave it to HDF5
            }
            found = Some(children);
        }
    }
    found.map(|children| (node[5], children))
}

/// The child nodes of `node`, where it is a chunk node above the leaves ([`chunk_node`]).
pub(super) fn child_nodes(node: &[u8], size: u64) -> Option<Vec<u64>> {
    chunk_node(node, size).and_then(|(level, children)| (level > 0).then_some(children))
}

/// The children of `node` read as `entries` entries with keys of `axes` offsets, where every
/// key and child is well formed: each key's last offset 0 (but the last key's), the keys in
/// order, the children distinct addresses inside the object.
fn children_if(node: &[u8], entries: usize, axes: usize, size: u64) -> Option<Vec<u64>> {
    let key = 8 + 8 * axes;
    let stride = key + ADDRESS;
    if HEADER + entries * stride + key > node.len() {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(node[at..at + 8].try_into().expect("8 bytes"));
    let offsets = |k: usize| {
        let at = HEADER + k * stride + 8;
        (0..axes).map(move |a| u64_at(at + 8 * a))
    };
    let mut children = Vec::with_capacity(entries);
    for k in 0..=entries {
        // (The last key bounds the node: past the dataset's end, its element's bytes.)
        if k < entries && offsets(k).next_back() != Some(0) {
            return None;
        }
        if k > 0 && offsets(k - 1).cmp(offsets(k)) == std::cmp::Ordering::Greater {
            return None;
        }
        if k < entries {
            let child = u64_at(HEADER + k * stride + key);
            if child == 0 || child >= size {
                return None;
            }
            children.push(child);
        }
    }
    let mut distinct = children.clone();
    distinct.sort_unstable();
    distinct.dedup();
    (distinct.len() == children.len()).then_some(children)
}

/// Index nodes fetched ahead of HDF5's reads: exact byte ranges by address, the oldest dropped
/// beyond [`KEPT_BYTES`].
#[derive(Default)]
pub(super) struct KeptNodes {
    nodes: BTreeMap<u64, Bytes>,
    order: VecDeque<u64>,
    bytes: usize,
}

impl KeptNodes {
    /// The bytes of `addr..addr + len` where one kept node holds them all.
    pub(super) fn get(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let (&start, node) = self.nodes.range(..=addr).next_back()?;
        let from = (addr - start) as usize;
        node.get(from..from.checked_add(len)?)
    }

    fn contains(&self, addr: u64) -> bool {
        self.nodes.contains_key(&addr)
    }

    pub(super) fn insert(&mut self, addr: u64, node: Bytes) {
        self.bytes += node.len();
        if let Some(old) = self.nodes.insert(addr, node) {
            self.bytes -= old.len();
        } else {
            self.order.push_back(addr);
        }
        while self.bytes > KEPT_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.nodes.remove(&old) {
                self.bytes -= gone.len();
            }
        }
    }
}

impl RemoteFile {
    /// Runs `walk` (a listing of a chunk index through HDF5: `H5Dchunk_iter`) with the index's
    /// nodes fetched ahead of HDF5's reads, one level of the tree at a time, each level's nodes
    /// all in flight together.
    pub fn walking_index<T>(&self, walk: impl FnOnce() -> T) -> T {
        struct Walking<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Walking<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Relaxed);
            }
        }
        if self.index_walks.fetch_add(1, Relaxed) == 0 {
            self.index_searched.store(false, Relaxed);
        }
        let _walking = Walking(&self.index_walks);
        walk()
    }

    /// After HDF5 read `bytes` at `addr` during a walk of an index: where they are a node of a
    /// chunk B-tree, the topmost node above it that this file holds (HDF5 may have the root from
    /// its own metadata accumulator, never asking for it again: the bytes it came from are in the
    /// block cache) and that node's subtree are found, and the subtree's nodes fetched, a level at
    /// a time (each of `bytes.len()`: a tree's nodes are all of one size, and HDF5 reads a node
    /// whole). A failed fetch is only logged: HDF5's own read of that node then makes the request
    /// again and reports its failure.
    pub(super) fn fetch_nodes_below(&self, addr: u64, bytes: &[u8]) {
        // The readers below read 8-byte addresses and lengths only: other files' indexes are
        // left to HDF5's own reads.
        if self.index_walks.load(Relaxed) == 0
            || self.address_sizes != Some((8, 8))
            || self.fetch_v2_tree(addr, bytes)
            || self.fetch_extensible_array(addr, bytes)
            || self.fetch_fixed_array(addr, bytes)
        {
            return;
        }
        if chunk_node(bytes, self.size).is_none() {
            return;
        }
        let len = bytes.len();
        let mut top = Bytes::copy_from_slice(bytes);
        // Once a walk: look for the nodes above (each holding the last one found as a child).
        if !self.index_searched.swap(true, Relaxed) {
            let mut below = addr;
            while let Some((at, parent)) = self.cached_parent(below, len) {
                (below, top) = (at, parent);
            }
        }
        let mut level: Vec<Bytes> = vec![top];
        let mut fetched_bytes = 0usize;
        while !level.is_empty() {
            let mut below: Vec<u64> = level
                .iter()
                .filter_map(|n| child_nodes(n, self.size))
                .flatten()
                .collect();
            below.sort_unstable();
            below.dedup();
            let ranges: Vec<Range<u64>> = {
                let kept = self.kept_nodes.lock().unwrap_or_else(|p| p.into_inner());
                below
                    .into_iter()
                    .filter(|&a| a != addr && !kept.contains(a))
                    .map(|a| a..(a + len as u64).min(self.size))
                    .collect()
            };
            fetched_bytes += ranges.len() * len;
            if ranges.is_empty() || fetched_bytes > KEPT_BYTES {
                return;
            }
            let Some(nodes) = self.fetch_kept(&ranges) else {
                return;
            };
            level = nodes;
        }
    }

    /// The bytes `addr..addr + len` where a kept node or the block cache holds them all.
    pub(super) fn held(&self, addr: u64, len: usize) -> Option<Bytes> {
        {
            let kept = self.kept_nodes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(node) = kept.get(addr, len) {
                return Some(Bytes::copy_from_slice(node));
            }
        }
        let block = super::CACHE_BLOCK;
        let (first, last) = (addr / block, (addr + len as u64 - 1) / block);
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(len);
        for i in first..=last {
            let b = cache.blocks.get(&i)?;
            let start = i * block;
            let from = addr.max(start) - start;
            let to = (addr + len as u64).min(start + b.len() as u64) - start;
            out.extend_from_slice(b.get(from as usize..to as usize)?);
        }
        (out.len() == len).then(|| Bytes::from(out))
    }

    /// Every header starting with `signature` in the blocks the block cache holds, as `parse`
    /// reads it from its first byte (where it can).
    pub(super) fn cached_headers<T>(
        &self,
        signature: &[u8],
        parse: impl Fn(&[u8]) -> Option<T>,
    ) -> Vec<T> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let mut headers = Vec::new();
        for block in cache.blocks.values() {
            let mut from = 0;
            while let Some(at) = find(&block[from..], signature) {
                let at = from + at;
                from = at + 1;
                headers.extend(parse(&block[at..]));
            }
        }
        headers
    }

    /// `addr..addr + len`, ending at the object's end at the latest.
    pub(super) fn node_range(&self, addr: u64, len: usize) -> Range<u64> {
        addr..(addr + len as u64).min(self.size)
    }

    /// Fetches the index blocks `ranges` (4 times `H5GDS_REMOTE_IN_FLIGHT` in flight), keeps
    /// them for HDF5's reads and counts them; `None` where a fetch failed, which is only logged
    /// (HDF5's own read of that block then asks again and reports it).
    pub(super) fn fetch_kept(&self, ranges: &[Range<u64>]) -> Option<Vec<Bytes>> {
        if ranges.is_empty() {
            return Some(Vec::new());
        }
        let in_flight = self.settings.in_flight.max(1) * NODES_IN_FLIGHT;
        match self.fetch(ranges, in_flight) {
            Ok(nodes) => {
                let mut kept = self.kept_nodes.lock().unwrap_or_else(|p| p.into_inner());
                for (range, node) in ranges.iter().zip(&nodes) {
                    kept.insert(range.start, node.clone());
                }
                self.counters
                    .index_nodes
                    .fetch_add(nodes.len() as u64, Relaxed);
                Some(nodes)
            }
            Err(e) => {
                tracing::debug!("fetching the chunk index's nodes ahead of HDF5 failed: {e}");
                None
            }
        }
    }

    /// A chunk node (its address and `len` bytes) among the block cache's blocks and the nodes
    /// kept that has the node at `child` among its children.
    fn cached_parent(&self, child: u64, len: usize) -> Option<(u64, Bytes)> {
        let is_parent =
            |node: &[u8]| child_nodes(node, self.size).is_some_and(|c| c.contains(&child));
        {
            let kept = self.kept_nodes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((&at, node)) = kept.nodes.iter().find(|(_, n)| is_parent(n)) {
                return Some((at, node.clone()));
            }
        }
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for (&index, block) in &cache.blocks {
            let start = index * super::CACHE_BLOCK;
            let mut from = 0;
            while let Some(at) = find(&block[from..], b"TREE").map(|p| from + p) {
                from = at + 1;
                // The node's bytes: in this block, or running on into the next one cached.
                let node = if at + len <= block.len() {
                    block.slice(at..at + len)
                } else {
                    let Some(next) = cache.blocks.get(&(index + 1)) else {
                        continue;
                    };
                    let mut joined = block[at..].to_vec();
                    joined.extend_from_slice(&next[..(len - joined.len()).min(next.len())]);
                    Bytes::from(joined)
                };
                if is_parent(&node) {
                    return Some((start + at as u64, node));
                }
            }
        }
        None
    }
}

/// Where `needle` first occurs in `hay`.
pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk node of `level` for a dataset of `rank` axes, with `children` and keys at rows
    /// 0, 4, 8, ... (one axis chunked by 4), padded to `entries_max` entries as HDF5 sizes nodes.
    fn node(level: u8, rank: usize, children: &[u64], entries_max: usize) -> Vec<u8> {
        let mut n = b"TREE".to_vec();
        n.extend([1, level]);
        n.extend((children.len() as u16).to_le_bytes());
        n.extend(u64::MAX.to_le_bytes());
        n.extend(u64::MAX.to_le_bytes());
        let key = |k: u64, n: &mut Vec<u8>| {
            n.extend(1000u32.to_le_bytes());
            n.extend(0u32.to_le_bytes());
            n.extend((4 * k).to_le_bytes());
            for _ in 1..=rank {
                n.extend(0u64.to_le_bytes());
            }
        };
        for (k, child) in children.iter().enumerate() {
            key(k as u64, &mut n);
            n.extend(child.to_le_bytes());
        }
        // The last key, as HDF5 writes it: the element's size as its last offset.
        key(children.len() as u64, &mut n);
        let at = n.len() - 8;
        n[at..].copy_from_slice(&4u64.to_le_bytes());
        let key_len = 8 + 8 * (rank + 1);
        let full = HEADER + entries_max * (key_len + ADDRESS) + key_len;
        n.resize(full, 0);
        n
    }

    #[test]
    fn the_children_of_a_node_above_the_leaves_are_found_for_its_rank() {
        for rank in [1, 2, 3, 5] {
            let children = [5_000, 90_000, 1_000_000];
            let n = node(1, rank, &children, 64);
            assert_eq!(
                child_nodes(&n, 2_000_000),
                Some(children.to_vec()),
                "rank {rank}"
            );
            // A leaf's children are chunks: nothing to fetch below it, but it is a chunk node.
            let leaf = node(0, rank, &children, 64);
            assert_eq!(child_nodes(&leaf, 2_000_000), None);
            assert_eq!(chunk_node(&leaf, 2_000_000), Some((0, children.to_vec())));
            // Children outside the object: not a node it can make out.
            assert_eq!(child_nodes(&n, 500_000), None);
        }
        // Not a chunk node: a group's node (type 0), another signature, too short.
        let mut group = node(1, 2, &[5_000, 6_000], 64);
        group[4] = 0;
        assert_eq!(child_nodes(&group, 10_000), None);
        assert_eq!(child_nodes(b"SNOD....", 10_000), None);
        assert_eq!(child_nodes(b"TREE\x01\x01", 10_000), None);
    }

    #[test]
    fn kept_nodes_serve_reads_inside_them_and_drop_the_oldest() {
        let mut kept = KeptNodes::default();
        kept.insert(100, Bytes::from(vec![7u8; 50]));
        assert_eq!(kept.get(110, 10), Some(&[7u8; 10][..]));
        assert_eq!(kept.get(140, 10), Some(&[7u8; 10][..]));
        assert_eq!(kept.get(140, 11), None);
        assert_eq!(kept.get(90, 5), None);
        let big = KEPT_BYTES / 2;
        kept.insert(1_000, Bytes::from(vec![1u8; big]));
        kept.insert(10_000_000, Bytes::from(vec![2u8; big]));
        // Over the bound: the oldest (at 100) went first.
        assert_eq!(kept.get(100, 1), None);
        assert_eq!(kept.get(10_000_000, 1), Some(&[2u8][..]));
    }
}
