//! The store a URL names, set up once per open: S3 (endpoint, region, credentials ranked as the AWS
//! CLI ranks them: h5gds settings, then environment, then the shared profile files) or plain HTTP,
//! with object_store's retries and timeouts, and every request sent counted (`Counters`).

use crate::config::RemoteSettings;
use crate::error::{Error, Result};
use crate::url_name::shown_url;
use object_store::aws::AmazonS3Builder;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// What a URL names: the store to ask and the object's path in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    S3 { bucket: String },
    Http { base: String, plain: bool },
}

/// Parses a URL given as file name into where to read it.
pub(super) fn target_of(url: &str) -> Result<(Target, ObjectPath)> {
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
pub(super) struct Built {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) facts: StoreFacts,
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
pub(super) fn build_store(
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
            inner: shared_client(options)?,
            sent: self.sent.clone(),
            path: self.path.clone(),
        }))
    }
}

/// object_store's HTTP clients of this process, by their options (as `Debug` writes them:
/// timeouts, whether plain HTTP is allowed, ...): one per set of options, shared by every open.
static CLIENTS: std::sync::Mutex<Vec<(u32, String, HttpClient)>> =
    std::sync::Mutex::new(Vec::new());

/// The process's client for `options`, made on first use and shared by later opens: the
/// connections an open leaves idle in its pool serve the next open of any object of that host,
/// which then starts without a connection's round trip (or a TLS handshake), its later
/// parallel GETs on connections already made; the client (its TLS set-up) is built once. A
/// forked child makes its own (the parent's connections belong to the parent's runtime). Each
/// open still counts its own requests (`CountingService`, per store).
fn shared_client(options: &ClientOptions) -> object_store::Result<HttpClient> {
    let pid = h5gds_runtime::process::id();
    let key = format!("{options:?}");
    let mut clients = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, _, client)) = clients.iter().find(|(p, k, _)| *p == pid && *k == key) {
        return Ok(client.clone());
    }
    let client = ReqwestConnector::default().connect(options)?;
    // (A parent's clients, left in a forked child, are never used there; nor dropped, which
    // would touch the parent's runtime.)
    clients.push((pid, key, client.clone()));
    Ok(client)
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
    /// Chunk index nodes fetched ahead of HDF5's walk (`index_nodes`).
    pub(crate) index_nodes: AtomicU64,
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
