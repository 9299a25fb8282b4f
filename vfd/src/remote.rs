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

use crate::config::RemoteSettings;
use crate::error::{Error, Result};
use crate::url_name::shown_url;
use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig,
};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use url::Url;

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

/// What a URL names: the store to ask and the object's path in it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    S3 { bucket: String },
    Http { base: String, plain: bool },
}

/// Parses a URL given as file name into where to read it.
fn target_of(url: &str) -> Result<(Target, ObjectPath)> {
    let bad = |why: &str| Error::RemoteOpen {
        url: shown_url(url),
        errno: libc::EINVAL,
        why: why.to_string(),
    };
    let parsed = Url::parse(url).map_err(|e| bad(&format!("not a valid URL ({e})")))?;
    if parsed.query().is_some() {
        return Err(bad(
            "a URL with a query string (a presigned URL, say) is not supported: give s3://bucket/key \
             with credentials in the environment, or a plain http(s):// URL",
        ));
    }
    let host = parsed.host_str().filter(|h| !h.is_empty());
    let path = ObjectPath::from_url_path(parsed.path().trim_start_matches('/'))
        .map_err(|e| bad(&format!("invalid object path ({e})")))?;
    if path.as_ref().is_empty() {
        return Err(bad("the URL names no object (empty path)"));
    }
    let target = match parsed.scheme() {
        "s3" => Target::S3 {
            bucket: host
                .ok_or_else(|| bad("no bucket in the s3:// URL"))?
                .to_string(),
        },
        scheme @ ("http" | "https") => {
            let host = host.ok_or_else(|| bad("no host in the URL"))?;
            let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
            Target::Http {
                base: format!("{scheme}://{host}{port}"),
                plain: scheme == "http",
            }
        }
        other => return Err(bad(&format!("unsupported scheme {other}"))),
    };
    Ok((target, path))
}

/// How a URL is read: the store, its endpoint, region and credentials, each with where it came
/// from. Never a secret: credentials are named by their source only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFacts {
    /// `S3`, `HTTP (plain)` or `HTTPS`.
    pub store: String,
    /// The host asked, and what chose it.
    pub endpoint: String,
    /// S3's region and where it came from; `None` for a web server.
    pub region: Option<String>,
    /// Which credentials sign the requests (their source, never their value).
    pub credentials: String,
}

/// A store built for one URL, with the facts of how it reads.
struct Built {
    store: Arc<dyn ObjectStore>,
    facts: StoreFacts,
}

/// The environment variable `name`, where it is set and not empty.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The S3 store for `bucket`: object_store's reading of the AWS environment, the profile of the
/// shared AWS files (`aws_profile`) under it, the S3 rows of `SETTINGS` over both (as the AWS CLI
/// ranks them: explicit settings, then the environment, then the profile).
fn s3_builder(
    bucket: &str,
    settings: &RemoteSettings,
) -> std::result::Result<(AmazonS3Builder, StoreFacts, bool), String> {
    use object_store::aws::AmazonS3ConfigKey as K;
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    let profile = crate::aws_profile::load(&env_var)?;
    let profile_name = |p: &crate::aws_profile::Profile, file: &Option<std::path::PathBuf>| {
        format!(
            "AWS profile '{}' ({})",
            p.name,
            file.as_deref()
                .map_or("the AWS files".into(), |f| f.display().to_string())
        )
    };
    // The endpoint: AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL in object_store's build, so
    // an endpoint chosen here is set as both.
    let env_endpoint = builder
        .get_config_value(&K::S3Endpoint)
        .map(|e| (e, "AWS_ENDPOINT_URL_S3"))
        .or_else(|| {
            builder
                .get_config_value(&K::Endpoint)
                .map(|e| (e, "AWS_ENDPOINT_URL"))
        });
    let (endpoint, endpoint_from) = match (&settings.s3_endpoint, env_endpoint, &profile) {
        (Some(e), _, _) => (Some(e.clone()), "H5GDS_S3_ENDPOINT".to_string()),
        (None, Some((e, var)), _) => (Some(e), var.to_string()),
        (None, None, Some(p)) if p.endpoint_url.is_some() => (
            p.endpoint_url.clone(),
            format!("endpoint_url of {}", profile_name(p, &p.settings_file)),
        ),
        _ => (None, String::new()),
    };
    let endpoint_shown = match &endpoint {
        Some(e) => {
            builder = builder
                .with_config(K::Endpoint, e.clone())
                .with_config(K::S3Endpoint, e.clone());
            format!("{} (from {endpoint_from})", shown_url(e))
        }
        None => "AWS's S3 endpoint for the region".to_string(),
    };
    // A plain-HTTP endpoint named by the setting is the user's say-so for HTTP; otherwise
    // AWS_ALLOW_HTTP=true says so, as object_store reads it.
    let allow_http = settings
        .s3_endpoint
        .as_deref()
        .is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"))
        || env_var("AWS_ALLOW_HTTP").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    // The region.
    let env_region = env_var("AWS_REGION")
        .map(|r| (r, "AWS_REGION"))
        .or_else(|| env_var("AWS_DEFAULT_REGION").map(|r| (r, "AWS_DEFAULT_REGION")));
    let region = match (&settings.s3_region, env_region, &profile) {
        (Some(r), _, _) => {
            builder = builder.with_region(r);
            format!("{r} (from H5GDS_S3_REGION)")
        }
        (None, Some((r, var)), _) => format!("{r} (from {var})"),
        (None, None, Some(p)) if p.region.is_some() => {
            let r = p.region.clone().unwrap_or_default();
            builder = builder.with_region(&r);
            format!("{r} (from region of {})", profile_name(p, &p.settings_file))
        }
        _ => "us-east-1 (object_store's default: no region set)".to_string(),
    };
    // The credentials, in the AWS CLI's order.
    let env_id = builder.get_config_value(&K::AccessKeyId);
    let env_secret = builder.get_config_value(&K::SecretAccessKey);
    let credentials = if settings.s3_anonymous {
        builder = builder.with_skip_signature(true);
        "none: unsigned requests (H5GDS_S3_ANONYMOUS=1)".to_string()
    } else if env_id.is_some() || env_secret.is_some() {
        if env_id.is_none() || env_secret.is_none() {
            return Err(format!(
                "{} is set but {} is not",
                if env_id.is_some() {
                    "AWS_ACCESS_KEY_ID"
                } else {
                    "AWS_SECRET_ACCESS_KEY"
                },
                if env_id.is_some() {
                    "AWS_SECRET_ACCESS_KEY"
                } else {
                    "AWS_ACCESS_KEY_ID"
                },
            ));
        }
        let token = builder.get_config_value(&K::Token).is_some();
        format!(
            "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY{})",
            if token { ", AWS_SESSION_TOKEN" } else { "" }
        )
    } else if env_var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() && env_var("AWS_ROLE_ARN").is_some()
    {
        "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN), exchanged by object_store"
            .to_string()
    } else if let Some((p, (id, secret))) = profile
        .as_ref()
        .map(|p| p.keys().map(|k| k.map(|k| (p, k))))
        .transpose()?
        .flatten()
    {
        // As one credential, so that no AWS_SESSION_TOKEN of the environment joins the profile's
        // keys.
        let credential = object_store::aws::AwsCredential {
            key_id: id.to_string(),
            secret_key: secret.to_string(),
            token: p.session_token.clone(),
        };
        builder = builder.with_credentials(Arc::new(object_store::StaticCredentialProvider::new(
            credential,
        )));
        format!(
            "{}{}",
            profile_name(p, &p.keys_file),
            if p.session_token.is_some() {
                ", with its session token"
            } else {
                ""
            }
        )
    } else if let Some(p) = profile.as_ref().filter(|p| !p.other_sources.is_empty()) {
        return Err(format!(
            "AWS profile '{}' gets its credentials through {}, which h5gds does not follow: put \
             keys in the environment (`aws configure export-credentials --profile {} --format \
             env`) or set H5GDS_S3_ANONYMOUS=1 for a public bucket",
            p.name,
            p.other_sources.join(", "),
            p.name
        ));
    } else if env_var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env_var("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
    {
        "the container's credentials (AWS_CONTAINER_CREDENTIALS_*), asked by object_store"
            .to_string()
    } else {
        "none found in the environment or the AWS files: object_store asks the instance \
         metadata service (EC2)"
            .to_string()
    };
    let facts = StoreFacts {
        store: "S3".into(),
        endpoint: endpoint_shown,
        region: Some(region),
        credentials,
    };
    Ok((builder, facts, allow_http))
}

/// The store for `target` under `settings`, every HTTP request it sends counted in `sent`.
fn build_store(
    target: &Target,
    path: &ObjectPath,
    settings: &RemoteSettings,
    sent: Arc<AtomicU64>,
) -> std::result::Result<Built, String> {
    let timeout = Duration::from_secs(settings.timeout_s);
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: settings.retries,
        retry_timeout: timeout * (settings.retries as u32 + 1),
    };
    let client = ClientOptions::new()
        .with_timeout(timeout)
        .with_connect_timeout(timeout);
    let connector = CountingConnector {
        sent,
        path: path.clone(),
    };
    match target {
        Target::S3 { bucket } => {
            let (builder, facts, allow_http) = s3_builder(bucket, settings)?;
            let store = builder
                .with_retry(retry)
                .with_client_options(client.with_allow_http(allow_http))
                .with_http_connector(connector)
                .build()
                .map_err(|e| e.to_string())?;
            Ok(Built {
                store: Arc::new(store),
                facts,
            })
        }
        Target::Http { base, plain } => {
            let store = HttpBuilder::new()
                .with_url(base)
                .with_retry(retry)
                .with_client_options(client.with_allow_http(*plain))
                .with_http_connector(connector)
                .build()
                .map_err(|e| e.to_string())?;
            Ok(Built {
                store: Arc::new(store),
                facts: StoreFacts {
                    store: if *plain { "HTTP (plain)" } else { "HTTPS" }.into(),
                    endpoint: format!("{base} (the URL's host)"),
                    region: None,
                    credentials: "none: the web server is asked without credentials".into(),
                },
            })
        }
    }
}

/// object_store's own HTTP client, each request for the object counted as it is sent: retries
/// included, so `sent - (HEADs + GETs)` is the retries made.
#[derive(Debug)]
struct CountingConnector {
    sent: Arc<AtomicU64>,
    path: ObjectPath,
}

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(CountingService {
            inner: ReqwestConnector::default().connect(options)?,
            sent: self.sent.clone(),
            path: self.path.clone(),
        }))
    }
}

#[derive(Debug)]
struct CountingService {
    inner: HttpClient,
    sent: Arc<AtomicU64>,
    path: ObjectPath,
}

#[async_trait::async_trait]
impl HttpService for CountingService {
    async fn call(&self, request: HttpRequest) -> std::result::Result<HttpResponse, HttpError> {
        // Only the object's own requests: not a credential service's (instance metadata, STS).
        let for_object = ObjectPath::from_url_path(request.uri().path())
            .is_ok_and(|p| p.as_ref().ends_with(self.path.as_ref()));
        if for_object {
            self.sent.fetch_add(1, Relaxed);
        }
        self.inner.execute(request).await
    }
}

/// Requests made for one open file, shown at `H5GDS_LOG=info` on close.
#[derive(Default, Debug)]
pub(crate) struct Counters {
    pub(crate) heads: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) cached_reads: AtomicU64,
    /// HTTP requests sent for the object, retries included (`CountingConnector`).
    pub(crate) sent: Arc<AtomicU64>,
}

impl Counters {
    /// The retries made: requests sent beyond one per HEAD and GET asked.
    pub(crate) fn retries(&self) -> u64 {
        let asked = self.heads.load(Relaxed) + self.gets.load(Relaxed);
        self.sent.load(Relaxed).saturating_sub(asked)
    }
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

/// One remote object opened read-only.
pub(crate) struct RemoteFile {
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

impl RemoteFile {
    /// Opens `url` read-only: asks the object's length and ETag (one HEAD). HDF5 access `flags`
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
        let version = meta.version.filter(|_| meta.e_tag.is_none());
        if meta.e_tag.is_none() && version.is_none() {
            return Err(Error::RemoteOpen {
                url: shown,
                errno: libc::EIO,
                why: "the server gives the object no ETag, so reads could mix versions of it; \
                      h5gds reads only objects it can pin to the version opened"
                    .into(),
            });
        }
        Ok(RemoteFile {
            url: shown,
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
             by the block cache",
            c.heads.load(Relaxed) + c.gets.load(Relaxed),
            c.heads.load(Relaxed),
            c.gets.load(Relaxed),
            c.retries(),
            c.bytes.load(Relaxed),
            c.cached_reads.load(Relaxed),
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
    fn fetch(&self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let store = self.store()?;
        let in_flight = self.settings.in_flight.max(1);
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
                    let options = GetOptions {
                        range: Some(GetRange::Bounded(ranges[next].clone())),
                        if_match: self.etag.clone(),
                        version: self.version.clone(),
                        ..GetOptions::default()
                    };
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
                let bytes = got.map_err(|e| match e {
                    object_store::Error::Precondition { .. } => failed(
                        range,
                        format!(
                            "the object changed since it was opened (its ETag is no longer {}): \
                             reopen the file to read the new version",
                            self.etag.as_deref().unwrap_or("the one opened")
                        ),
                    ),
                    other => failed(range, explain(&other, &self.url)),
                })?;
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
            return self.read_cached(addr, buf);
        }
        let step = self.settings.request_size as u64;
        let ranges: Vec<Range<u64>> = (0..(inside as u64).div_ceil(step))
            .map(|k| addr + k * step..(addr + (k + 1) * step).min(addr + inside as u64))
            .collect();
        for (range, bytes) in ranges.iter().zip(self.fetch(&ranges)?) {
            let at = (range.start - addr) as usize;
            buf[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
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
            self.fetch(&byte_ranges)?
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

/// What `h5gds info <url>` says of a URL: how it would be read, and whether the object answers.
#[derive(Debug, Clone)]
pub struct UrlReport {
    /// The URL as shown (no user info nor query).
    pub url: String,
    /// The remote settings in effect (the S3 and remote rows of `SETTINGS`), where they are valid.
    pub settings: Option<RemoteSettings>,
    /// The store, endpoint, region and credentials' source, where the client can be set up.
    pub facts: Option<StoreFacts>,
    /// The object as one HEAD finds it, or why it cannot be read.
    pub object: std::result::Result<ObjectFacts, String>,
}

/// A remote object as its HEAD answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFacts {
    pub size: u64,
    /// The ETag every read would be conditional on.
    pub etag: Option<String>,
    /// The version asked for instead, where the store gives one and no ETag.
    pub version: Option<String>,
}

/// How `url` would be read by the driver opened now in this process (its environment), and
/// whether the object is reachable (one HEAD, as an open makes). Never fails: what goes wrong is
/// the report's `object` error.
pub fn url_report(url: &str) -> UrlReport {
    let shown = shown_url(url);
    let settings = match RemoteSettings::from_env(|name| std::env::var_os(name)) {
        Ok(settings) => settings,
        Err(e) => {
            return UrlReport {
                url: shown,
                settings: None,
                facts: None,
                object: Err(e.to_string()),
            }
        }
    };
    let facts = target_of(url)
        .map_err(|e| e.to_string())
        .and_then(|(target, path)| {
            build_store(&target, &path, &settings, Arc::default())
                .map(|built| built.facts)
                .map_err(|why| format!("cannot set up the client: {why}"))
        });
    let (facts, object) = match facts {
        Ok(facts) => {
            let object = RemoteFile::open(url, 0, &settings)
                .map(|file| ObjectFacts {
                    size: file.size,
                    etag: file.etag.clone(),
                    version: file.version.clone(),
                })
                .map_err(|e| e.to_string());
            (Some(facts), object)
        }
        Err(why) => (None, Err(why)),
    };
    UrlReport {
        url: shown,
        settings: Some(settings),
        facts,
        object,
    }
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
