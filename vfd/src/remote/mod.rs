//! Remote files: an `s3://`, `http://` or `https://` URL given as the file name is opened
//! read-only and read with ranged GETs through object_store (S3 signing, the AWS credential
//! chain, retries with backoff, HTTP ranges), on one tokio runtime per process
//! ([`runtime`], rebuilt in a forked child like `h5gds_runtime::pool`).
//!
//! The object's ETag (or, lacking one, its version) is taken at open and every later request is
//! conditional on it (`If-Match`), so the bytes of one open all come from the version that was
//! opened: an object replaced while open fails the next request that reaches the server. That
//! makes the object immutable for the open's lifetime, so small reads (HDF5's metadata) go
//! through a block cache ([`BlockCache`]), whose missing neighbouring blocks are fetched as one
//! request. A large read is split into `request_size` ranged GETs, `in_flight` at a time.
//!
//! Credentials never reach a message: URLs are shown without user info or query
//! (`url_name::shown_url`), and object_store's errors name the request's URL, which for S3 carries no
//! credential (they travel in headers).
//!
//! - [`store`]: the store a URL names (S3 or HTTP), its settings ranked, its requests counted.
//! - [`report`]: what `h5gds info <url>` says of a URL.

use crate::config::RemoteSettings;
use crate::error::{Error, Result};
use crate::url_name::shown_url;
use bytes::Bytes;
use index_nodes::KeptNodes;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, Weak};
use url::Url;

mod index_ea;
mod index_fa;
mod index_nodes;
mod index_v2;
mod ranges;
mod report;
mod store;

pub use ranges::InOrder;
pub use report::{url_report, ObjectFacts, UrlReport};
pub use store::StoreFacts;
use store::{build_store, target_of, Built, Counters, Target};

/// The block of the metadata cache: reads up to this size go through it.
pub const CACHE_BLOCK: u64 = 256 << 10;
/// Blocks kept per open file (64 MiB), the oldest dropped first.
const CACHE_BLOCKS: usize = 256;

struct Runtime {
    pid: u32,
    runtime: Arc<tokio::runtime::Runtime>,
}

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);

/// The process's tokio runtime for remote requests, started on first use. A forked child finds
/// its parent's (whose threads do not exist here): it abandons it without dropping it (dropping
/// would wait for those threads) and starts its own.
fn runtime() -> Result<Arc<tokio::runtime::Runtime>> {
    let mut guard = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    let pid = h5gds_runtime::process::id();
    if guard.as_ref().is_some_and(|r| r.pid != pid) {
        std::mem::forget(guard.take());
    }
    if let Some(r) = guard.as_ref() {
        return Ok(r.runtime.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name("h5gds-remote")
        .enable_all()
        .build()
        .map_err(|e| Error::Device(format!("could not start the remote-request runtime: {e}")))?;
    let runtime = Arc::new(runtime);
    *guard = Some(Runtime {
        pid,
        runtime: runtime.clone(),
    });
    Ok(runtime)
}

/// Runs `work` on the runtime from a thread outside it (HDF5's caller).
fn block_on<T>(work: impl std::future::Future<Output = T>) -> Result<T> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::InvalidArgument(
            "a remote file read from inside a tokio runtime: call HDF5 from a plain thread".into(),
        ));
    }
    Ok(runtime()?.block_on(work))
}

/// Blocks of `CACHE_BLOCK` bytes of one open object, by index; the oldest go first.
#[derive(Default)]
struct BlockCache {
    blocks: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
}

impl BlockCache {
    fn insert(&mut self, index: u64, block: Bytes) {
        if self.blocks.insert(index, block).is_none() {
            self.order.push_back(index);
        }
        while self.order.len() > CACHE_BLOCKS {
            if let Some(old) = self.order.pop_front() {
                self.blocks.remove(&old);
            }
        }
    }
}

/// The object store client, rebuilt in a forked child (its connections belong to the parent's
/// runtime).
struct StoreForProcess {
    pid: u32,
    store: Arc<dyn ObjectStore>,
}

/// One remote object opened read-only. The driver holds it (`OpenFile::remote`); the engine's
/// read with no HDF5 call finds it from the handle `get_handle` hands out ([`remote_file_at`]).
pub struct RemoteFile {
    /// What `get_handle` points to: -1, no descriptor (read as an int by whoever takes the
    /// handle for sec2's), at an address that names this file ([`remote_file_at`]).
    pub(crate) handle: std::ffi::c_int,
    /// The URL as shown in messages (`url_name::shown_url`).
    pub(crate) url: String,
    target: Target,
    path: ObjectPath,
    settings: RemoteSettings,
    /// How it is read (store, endpoint, region, credentials' source).
    pub(crate) facts: StoreFacts,
    store: Mutex<StoreForProcess>,
    /// The object's length at open.
    pub(crate) size: u64,
    /// The ETag every request is conditional on (`If-Match`).
    etag: Option<String>,
    /// The version asked for where the store gives versions and no ETag.
    version: Option<String>,
    cache: Mutex<BlockCache>,
    /// Chunk index nodes fetched ahead of HDF5's walks (`index_nodes`), by address.
    kept_nodes: Mutex<KeptNodes>,
    /// Walks of a chunk index under way ([`RemoteFile::walking_index`]).
    index_walks: AtomicUsize,
    /// Whether this walk has looked for the nodes above the first it met (`index_nodes`).
    index_searched: AtomicBool,
    /// The bytes of an address and of a length in the file (its superblock's "size of offsets"
    /// and "size of lengths"), where the open's first block holds the superblock: the chunk
    /// index readers read only files of 8 and 8 (HDF5's default), leaving others to HDF5.
    pub(crate) address_sizes: Option<(u8, u8)>,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFile")
            .field("url", &self.url)
            .field("size", &self.size)
            .field("etag", &self.etag)
            .finish_non_exhaustive()
    }
}

/// The words for an object_store error, its status and what it means, without the URL's query.
fn explain(err: &object_store::Error, url: &str) -> String {
    let text = err.to_string();
    // A query never reaches a request (refused at open), but be sure no secret is echoed.
    match Url::parse(url)
        .ok()
        .and_then(|u| u.query().map(str::to_string))
    {
        Some(query) => text.replace(&query, "<query hidden>"),
        None => text,
    }
}

/// The object's first block (up to [`CACHE_BLOCK`] bytes) and what its response says of the
/// object: its length (from `Content-Range`), ETag and version.
async fn first_block(
    store: &dyn ObjectStore,
    path: &ObjectPath,
) -> object_store::Result<(object_store::ObjectMeta, Bytes)> {
    let options = GetOptions {
        range: Some(GetRange::Bounded(0..CACHE_BLOCK)),
        ..GetOptions::default()
    };
    let got = store.get_opts(path, options).await?;
    let meta = got.meta.clone();
    let expected = meta.size.min(CACHE_BLOCK);
    let bytes = got.bytes().await?;
    if bytes.len() as u64 != expected {
        return Err(object_store::Error::Generic {
            store: "h5gds",
            source: format!("the first block's GET answered {} bytes", bytes.len()).into(),
        });
    }
    Ok((meta, bytes))
}

/// The "size of offsets" and "size of lengths" of the superblock found in `first` (the object's
/// first bytes), HDF5's signature at byte 0, 512, 1024, 2048, ... (after a user block).
fn superblock_sizes(first: &[u8]) -> Option<(u8, u8)> {
    const SIGNATURE: &[u8] = b"\x89HDF\r\n\x1a\n";
    let at = std::iter::successors(Some(0usize), |&a| Some(if a == 0 { 512 } else { 2 * a }))
        .take_while(|&a| a + 16 <= first.len())
        .find(|&a| first[a..].starts_with(SIGNATURE))?;
    let sb = &first[at..];
    // Versions 0 and 1: version, free space, root group and shared header versions, a reserved
    // byte, then the sizes; 2 and 3: the sizes right after the version.
    match sb[8] {
        0 | 1 => Some((sb[13], sb[14])),
        2 | 3 => Some((sb[9], sb[10])),
        _ => None,
    }
}

impl RemoteFile {
    /// Opens `url` read-only: asks the object's first block, whose answer gives its length and
    /// ETag (else one HEAD, which says why it cannot be read). HDF5 access `flags`
    /// asking to write or create are refused before any request is made.
    pub(crate) fn open(url: &str, flags: u32, settings: &RemoteSettings) -> Result<RemoteFile> {
        use crate::abi::{H5F_ACC_CREAT, H5F_ACC_EXCL, H5F_ACC_RDWR, H5F_ACC_TRUNC};
        let shown = shown_url(url);
        if flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC | H5F_ACC_EXCL) != 0 {
            return Err(Error::RemoteOpen {
                url: shown,
                errno: libc::EROFS,
                why: format!(
                    "remote files are read-only: open it for reading (h5py mode \"r\"); access \
                     flags {flags:#x} ask to write or create, and nothing was sent"
                ),
            });
        }
        let (target, path) = target_of(url)?;
        let counters = Counters::default();
        let Built { store, facts } = build_store(&target, &path, settings, counters.sent.clone())
            .map_err(|why| Error::RemoteOpen {
            url: shown.clone(),
            errno: libc::EINVAL,
            why: format!("cannot set up the client: {why}"),
        })?;
        // The first block's GET tells the length and ETag as a HEAD would, and brings the
        // superblock with them: one round trip, not two. Where it fails (an empty object has no
        // first block), the HEAD says why.
        counters.gets.fetch_add(1, Relaxed);
        if let Ok((meta, first)) = block_on(first_block(store.as_ref(), &path))? {
            counters.bytes.fetch_add(first.len() as u64, Relaxed);
            let mut file = RemoteFile::pinned(
                url,
                (target, path),
                settings,
                (store, facts, counters),
                meta,
            )?;
            file.address_sizes = superblock_sizes(&first);
            let mut cache = file.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.insert(0, first);
            drop(cache);
            return Ok(file);
        }
        counters.heads.fetch_add(1, Relaxed);
        let head = block_on(store.head(&path))?;
        let meta = head.map_err(|e| {
            let errno = match &e {
                object_store::Error::NotFound { .. } => libc::ENOENT,
                object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. } => libc::EACCES,
                _ => libc::EIO,
            };
            let what = match &target {
                Target::S3 { .. } => format!(
                    "HEAD of the object (endpoint {}, region {}, credentials: {})",
                    facts.endpoint,
                    facts.region.as_deref().unwrap_or("-"),
                    facts.credentials
                ),
                Target::Http { .. } => "HEAD of the URL".to_string(),
            };
            Error::RemoteOpen {
                url: shown.clone(),
                errno,
                why: format!("{what} failed: {}", explain(&e, url)),
            }
        })?;
        RemoteFile::pinned(
            url,
            (target, path),
            settings,
            (store, facts, counters),
            meta,
        )
    }

    /// The file opened at the version `meta` names (its ETag, else its version); refused where
    /// the server names neither.
    fn pinned(
        url: &str,
        (target, path): (Target, ObjectPath),
        settings: &RemoteSettings,
        (store, facts, counters): (Arc<dyn ObjectStore>, StoreFacts, Counters),
        meta: object_store::ObjectMeta,
    ) -> Result<RemoteFile> {
        let version = meta.version.filter(|_| meta.e_tag.is_none());
        if meta.e_tag.is_none() && version.is_none() {
            return Err(Error::RemoteOpen {
                url: shown_url(url),
                errno: libc::EIO,
                why: "the server gives the object no ETag, so reads could mix versions of it; \
                      h5gds reads only objects it can pin to the version opened"
                    .into(),
            });
        }
        Ok(RemoteFile {
            handle: -1,
            url: shown_url(url),
            target,
            path,
            settings: settings.clone(),
            facts,
            store: Mutex::new(StoreForProcess {
                pid: h5gds_runtime::process::id(),
                store,
            }),
            size: meta.size,
            etag: meta.e_tag,
            version,
            cache: Mutex::new(BlockCache::default()),
            kept_nodes: Mutex::default(),
            index_walks: AtomicUsize::new(0),
            index_searched: AtomicBool::new(false),
            address_sizes: None,
            counters,
        })
    }

    /// How this file is read, for the open log line.
    pub(crate) fn describe(&self) -> String {
        let f = &self.facts;
        let how = match &f.region {
            Some(region) => format!(
                "{} (endpoint {}, region {}, credentials: {})",
                f.store, f.endpoint, region, f.credentials
            ),
            None => f.store.clone(),
        };
        format!(
            "remote, read-only: {how}; ranged GETs of {} with {} in flight, {} retries; reads up \
             to {} through a block cache; every request conditional on ETag {}",
            crate::config::format_size(self.settings.request_size as u64),
            self.settings.in_flight,
            self.settings.retries,
            crate::config::format_size(CACHE_BLOCK),
            self.etag
                .as_deref()
                .or(self.version.as_deref())
                .unwrap_or("-"),
        )
    }

    /// The requests made, for the close log line.
    pub(crate) fn requests_summary(&self) -> String {
        let c = &self.counters;
        format!(
            "{} requests ({} HEAD, {} ranged GET), {} retried, {} bytes fetched, {} reads served \
             by the block cache, {} chunk index nodes fetched ahead",
            c.heads.load(Relaxed) + c.gets.load(Relaxed),
            c.heads.load(Relaxed),
            c.gets.load(Relaxed),
            c.retries(),
            c.bytes.load(Relaxed),
            c.cached_reads.load(Relaxed),
            c.index_nodes.load(Relaxed),
        )
    }

    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        let mut guard = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let pid = h5gds_runtime::process::id();
        if guard.pid != pid {
            let sent = self.counters.sent.clone();
            let store = build_store(&self.target, &self.path, &self.settings, sent)
                .map_err(|e| Error::RemoteRead {
                    url: self.url.clone(),
                    offset: 0,
                    size: 0,
                    why: format!("cannot set up the client in this process: {e}"),
                })?
                .store;
            // The parent's client holds connections of the parent's runtime: never used here.
            std::mem::forget(std::mem::replace(&mut guard.store, store));
            guard.pid = pid;
        }
        Ok(guard.store.clone())
    }

    /// Fetches `ranges` (each within the object), `in_flight` at a time, every GET conditional
    /// on the ETag opened; the bytes in the order of `ranges`.
    fn fetch(&self, ranges: &[Range<u64>], in_flight: usize) -> Result<Vec<Bytes>> {
        let store = self.store()?;
        let in_flight = in_flight.max(1);
        let failed = |range: &Range<u64>, why: String| Error::RemoteRead {
            url: self.url.clone(),
            offset: range.start,
            size: range.end - range.start,
            why,
        };
        let work = async {
            let mut tasks = tokio::task::JoinSet::new();
            let mut out: Vec<Option<Bytes>> = vec![None; ranges.len()];
            let mut next = 0;
            while next < ranges.len() || !tasks.is_empty() {
                while next < ranges.len() && tasks.len() < in_flight {
                    let options = self.get_options(ranges[next].clone());
                    let (store, path, index) = (store.clone(), self.path.clone(), next);
                    self.counters.gets.fetch_add(1, Relaxed);
                    tasks.spawn(async move {
                        let got = match store.get_opts(&path, options).await {
                            Ok(got) => got.bytes().await,
                            Err(e) => Err(e),
                        };
                        (index, got)
                    });
                    next += 1;
                }
                let Some(joined) = tasks.join_next().await else {
                    break;
                };
                let (index, got) =
                    joined.map_err(|e| failed(&ranges[0], format!("request task: {e}")))?;
                let range = &ranges[index];
                let bytes = got.map_err(|e| self.request_error(range, e))?;
                if bytes.len() as u64 != range.end - range.start {
                    return Err(failed(
                        range,
                        format!("the server answered {} bytes", bytes.len()),
                    ));
                }
                self.counters.bytes.fetch_add(bytes.len() as u64, Relaxed);
                out[index] = Some(bytes);
            }
            // Every slot is filled once the loop ends without an error.
            Ok::<Vec<Bytes>, Error>(out.into_iter().flatten().collect())
        };
        block_on(work)?
    }

    /// Reads `buf.len()` bytes at `addr`; past the object's end, zeros (as sec2 reads past EOF).
    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let end = addr.saturating_add(buf.len() as u64);
        let inside = end.min(self.size).saturating_sub(addr) as usize;
        buf[inside..].fill(0);
        if inside == 0 {
            return Ok(());
        }
        let buf = &mut buf[..inside];
        if inside as u64 <= CACHE_BLOCK {
            let kept = {
                let kept = self.kept_nodes.lock().unwrap_or_else(|p| p.into_inner());
                kept.get(addr, inside).map(|node| buf.copy_from_slice(node))
            };
            match kept {
                Some(()) => {
                    self.counters.cached_reads.fetch_add(1, Relaxed);
                }
                None => self.read_cached(addr, buf)?,
            }
            self.fetch_nodes_below(addr, buf);
            return Ok(());
        }
        // Split into GETs of `request_size` by `read_pieces`, each body copied once into place.
        self.read_pieces(vec![(addr, buf)])
    }

    /// A small read through the block cache: the missing blocks it covers, neighbours fetched
    /// together, then copied out.
    fn read_cached(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let end = addr + buf.len() as u64;
        let (first, last) = (addr / CACHE_BLOCK, (end - 1) / CACHE_BLOCK);
        let missing: Vec<u64> = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            (first..=last)
                .filter(|i| !cache.blocks.contains_key(i))
                .collect()
        };
        if missing.is_empty() {
            self.counters.cached_reads.fetch_add(1, Relaxed);
        }
        // Runs of consecutive missing blocks, one GET each.
        let mut runs: Vec<Range<u64>> = Vec::new();
        for &i in &missing {
            match runs.last_mut() {
                Some(run) if run.end == i => run.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
        let byte_ranges: Vec<Range<u64>> = runs
            .iter()
            .map(|r| r.start * CACHE_BLOCK..(r.end * CACHE_BLOCK).min(self.size))
            .collect();
        let fetched = if byte_ranges.is_empty() {
            Vec::new()
        } else {
            self.fetch(&byte_ranges, self.settings.in_flight)?
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let mut have: HashMap<u64, Bytes> = HashMap::new();
        for (run, bytes) in runs.iter().zip(fetched) {
            for i in run.clone() {
                let from = ((i - run.start) * CACHE_BLOCK) as usize;
                let to = (from + CACHE_BLOCK as usize).min(bytes.len());
                let block = bytes.slice(from..to);
                have.insert(i, block.clone());
                cache.insert(i, block);
            }
        }
        for i in first..=last {
            let block = match have.get(&i) {
                Some(b) => b.clone(),
                None => cache
                    .blocks
                    .get(&i)
                    .cloned()
                    .ok_or_else(|| Error::RemoteRead {
                        url: self.url.clone(),
                        offset: addr,
                        size: buf.len() as u64,
                        why: "a cached block went missing".into(),
                    })?,
            };
            let block_start = i * CACHE_BLOCK;
            let from = addr.max(block_start);
            let to = end.min(block_start + block.len() as u64);
            buf[(from - addr) as usize..(to - addr) as usize].copy_from_slice(
                &block[(from - block_start) as usize..(to - block_start) as usize],
            );
        }
        Ok(())
    }
}

/// The remote files open in this process (this copy of the driver), for [`remote_file_at`].
static OPEN_FILES: Mutex<Vec<Weak<RemoteFile>>> = Mutex::new(Vec::new());

impl RemoteFile {
    /// Opens `url` as [`RemoteFile::open`] does, shared, and known to [`remote_file_at`] while
    /// it is alive.
    pub(crate) fn open_shared(
        url: &str,
        flags: u32,
        settings: &RemoteSettings,
    ) -> Result<Arc<RemoteFile>> {
        let file = Arc::new(RemoteFile::open(url, flags, settings)?);
        let mut open = OPEN_FILES.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|f| f.strong_count() > 0);
        open.push(Arc::downgrade(&file));
        Ok(file)
    }

    /// The handle `get_handle` hands out: the address of [`RemoteFile::handle`] (an int, -1).
    pub(crate) fn handle_ptr(&self) -> *mut std::ffi::c_void {
        (&raw const self.handle).cast_mut().cast()
    }

    /// The URL, as shown in messages (no user info, no query).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The object's length at open.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Reads `buf.len()` bytes at `addr`, all inside the object (an error past its end): small
    /// reads through the block cache, large ones as [`RemoteFile::read_pieces`].
    pub fn read_at(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let end = addr.saturating_add(buf.len() as u64);
        if end > self.size {
            return Err(Error::RemoteRead {
                url: self.url.clone(),
                offset: addr,
                size: buf.len() as u64,
                why: format!("past the object's end (it has {} bytes)", self.size),
            });
        }
        self.read(addr, buf)
    }
}

/// The remote file whose `get_handle` handle (`H5Fget_vfd_handle`) is `handle`, where it is one
/// this copy of the driver opened and is still alive; `None` otherwise (a local file's
/// descriptor, or a remote file of another copy of h5gds loaded in the process, whose objects
/// this one cannot use). The address is only compared, never read.
pub fn remote_file_at(handle: *const std::ffi::c_void) -> Option<Arc<RemoteFile>> {
    let open = OPEN_FILES.lock().unwrap_or_else(|p| p.into_inner());
    open.iter()
        .filter_map(Weak::upgrade)
        .find(|f| std::ptr::eq(f.handle_ptr().cast_const(), handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_store_and_path() {
        let (t, p) = target_of("s3://bkt/dir/my%20file.h5").unwrap();
        assert_eq!(
            t,
            Target::S3 {
                bucket: "bkt".into()
            }
        );
        assert_eq!(p.as_ref(), "dir/my file.h5");
        let (t, p) = target_of("http://127.0.0.1:8080/data/x.h5").unwrap();
        assert_eq!(
            t,
            Target::Http {
                base: "http://127.0.0.1:8080".into(),
                plain: true
            }
        );
        assert_eq!(p.as_ref(), "data/x.h5");
        let err = target_of("s3://bkt/").unwrap_err().to_string();
        assert!(err.contains("names no object"), "{err}");
        let err = target_of("https://h/x.h5?sig=SECRET")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("query string") && !err.contains("SECRET"),
            "{err}"
        );
    }

    #[test]
    fn a_write_mode_is_refused_before_any_request() {
        use crate::abi::{H5F_ACC_CREAT, H5F_ACC_RDWR, H5F_ACC_TRUNC};
        // Port 9 (discard) on loopback: were a request made, the error would be a connection's.
        for flags in [H5F_ACC_RDWR, H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC] {
            let err =
                RemoteFile::open("http://127.0.0.1:9/x.h5", flags, &RemoteSettings::default())
                    .unwrap_err()
                    .to_string();
            assert!(
                err.contains("read-only") && err.contains("errno = 30"),
                "{err}"
            );
            assert!(err.contains("nothing was sent"), "{err}");
        }
    }

    #[test]
    fn the_superblock_says_the_sizes_of_addresses_and_lengths() {
        let mut v0 = b"\x89HDF\r\n\x1a\n".to_vec();
        v0.extend([0, 0, 0, 0, 0, 4, 4, 0]);
        assert_eq!(superblock_sizes(&v0), Some((4, 4)));
        let mut v3 = b"\x89HDF\r\n\x1a\n".to_vec();
        v3.extend([3, 8, 8, 0, 0, 0, 0, 0]);
        assert_eq!(superblock_sizes(&v3), Some((8, 8)));
        // After a user block of 1024 bytes; none; a version it does not know.
        let mut user = vec![0u8; 1024];
        user.extend(&v3);
        assert_eq!(superblock_sizes(&user), Some((8, 8)));
        assert_eq!(superblock_sizes(&[0u8; 4096]), None);
        v3[8] = 9;
        assert_eq!(superblock_sizes(&v3), None);
    }

    #[test]
    fn the_cache_keeps_the_newest_blocks() {
        let mut cache = BlockCache::default();
        for i in 0..(CACHE_BLOCKS as u64 + 3) {
            cache.insert(i, Bytes::from(vec![i as u8; 4]));
        }
        assert_eq!(cache.blocks.len(), CACHE_BLOCKS);
        assert!(!cache.blocks.contains_key(&2) && cache.blocks.contains_key(&3));
        assert_eq!(
            cache.blocks[&(CACHE_BLOCKS as u64 + 2)][0],
            (CACHE_BLOCKS + 2) as u8
        );
    }
}
