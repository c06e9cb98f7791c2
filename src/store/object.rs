//! A store in object storage: an S3-compatible bucket (read-write) or a plain HTTP(S) location
//! (read-only), served by the Arrow project's `object_store` crate.
//!
//! The core's `Store` is synchronous: each call here runs its request on a Tokio runtime that
//! lives inside this store and nowhere else, blocking the calling thread (a FUSE request thread
//! or a pool worker). Concurrency comes from those threads, so a mount on object storage gets
//! more workers (`super::REMOTE_WORKERS`) to keep requests in flight while a reader streams.
//!
//! An object PUT is atomic, so values are written in place with no temporary name. Metadata
//! documents are written with conditional PUTs (If-Match on the ETag they were read at, or
//! If-None-Match when they were absent), so a change another writer made since is detected and
//! the write fails instead of silently replacing it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    ClientOptions, GetOptions, GetRange, ObjectStore as Remote, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig, UpdateVersion,
};

mod listed;
mod listing;
mod metered;

use metered::MeteredConnector;

use listed::{Consolidation, Listed, ListedKeys};

use super::{ByteRange, Entry, Expect, Head, ReadConsolidated, RemoteLocation, RemoteOptions, Store, Usage, Value, Version};
use crate::error::lock;
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::{Error, Result};

/// Requests made, by kind: `.zarrfs/stats` shows them, and tests count them.
#[derive(Debug, Default)]
pub struct RequestCounts {
    pub get: AtomicU64,
    pub ranged_get: AtomicU64,
    pub head: AtomicU64,
    pub put: AtomicU64,
    pub delete: AtomicU64,
    pub list: AtomicU64,
    pub bytes_fetched: AtomicU64,
}

impl RequestCounts {
    pub fn to_json(&self) -> serde_json::Value {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "get": n(&self.get), "ranged_get": n(&self.ranged_get), "head": n(&self.head), "put": n(&self.put),
            "delete": n(&self.delete), "list": n(&self.list), "bytes_fetched": n(&self.bytes_fetched),
        })
    }
}

/// Documents whose writes are guarded by conditional PUTs: the node metadata another writer
/// may change too. Chunks are not: two writers of one chunk are a race Zarr does not arbitrate.
/// (Over plain HTTP, these are also what a directory listing asks for.)
const GUARDED: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

fn guarded(key: &str) -> bool {
    GUARDED.contains(&key.rsplit('/').next().unwrap_or(key))
}

/// How a directory listing is answered.
enum Listing {
    /// The bucket lists its keys.
    Bucket,
    /// Plain HTTP cannot list: the children of a group are the ones its consolidated metadata
    /// names (read once).
    Consolidated(OnceLock<Vec<String>>),
}

pub struct ObjectStore {
    remote: Arc<dyn Remote>,
    /// A bucket's listings where object_store cannot parse a key (S3 only).
    raw: Option<listing::RawListing>,
    runtime: tokio::runtime::Runtime,
    location: RemoteLocation,
    listing: Listing,
    /// The ETag and version (a GCS generation) each guarded document was last read or written
    /// at (`None`: seen absent): a conditional PUT names them.
    etags: Mutex<HashMap<String, Option<UpdateVersion>>>,
    /// The ETags of the chunks read or written last, a bounded number: a conditional PUT of
    /// a chunk names the one its version came from without asking for it first.
    chunk_etags: Mutex<lru::LruCache<String, UpdateVersion>>,
    /// What recent listings of the bucket showed (for the metadata TTL).
    listed: ListedKeys,
    /// How a directory's consolidated metadata is read (the format layer's).
    consolidated: Option<ReadConsolidated>,
    pub requests: Arc<RequestCounts>,
    /// The server answered a range with the whole value (`python -m http.server`): values are
    /// read whole, and the last one kept for the ranges asked of it.
    ignores_ranges: std::sync::atomic::AtomicBool,
    whole: Mutex<Option<WholeValue>>,
}

/// A value read whole: its key, its version, its bytes.
type WholeValue = (String, Version, Arc<[u8]>);

/// The most a value of a server that ignores Range requests is read whole (and at most
/// `--max-chunk-size`).
const MOST_READ_WHOLE: u64 = 256 << 20;

/// Chunks whose ETags are kept for conditional PUTs (some 100 bytes each).
const CHUNK_ETAGS: std::num::NonZeroUsize = std::num::NonZeroUsize::new(1 << 16).unwrap();

/// Documents fetched at once after a listing: a walk then finds them read.
const DOCUMENTS_IN_FLIGHT: usize = 128;

/// The document `key`, fetched whole if it holds no more than `max` bytes (one grown past what
/// a listing showed, a hostile server's endless body included, is not read: it waits to be
/// asked for, bounded then), once `turn` gives a place among the requests in flight.
async fn fetch_document(
    remote: Arc<dyn Remote>,
    key: String,
    max: u64,
    turn: Option<Arc<tokio::sync::Semaphore>>,
) -> (object_store::Result<(bytes::Bytes, object_store::ObjectMeta)>, String) {
    let _turn = match turn {
        Some(t) => t.acquire_owned().await.ok(),
        None => None,
    };
    let got = async {
        let r = remote.get_opts(&ObjectPath::parse(&key)?, GetOptions::default()).await?;
        if r.meta.size > max {
            return Err(object_store::Error::Generic { store: "listing", source: "larger than the listing's bound".into() });
        }
        let meta = r.meta.clone();
        Ok((r.bytes().await?, meta))
    };
    (got.await, key)
}

fn join_failed(e: tokio::task::JoinError) -> object_store::Error {
    object_store::Error::Generic { store: "listing", source: Box::new(e) }
}

/// `step` of a GET (its answer, or a body of `bytes`) within its whole time, retries included:
/// `TRANSFER_BASE`, and a second for every `TRANSFER_RATE` bytes (a slow link still moves a
/// large chunk). Each wait for a byte is bounded by the client; this bounds their sum, so a
/// server that trickles cannot hold a read for minutes.
async fn within<T>(bytes: u64, step: impl Future<Output = object_store::Result<T>>) -> object_store::Result<T> {
    let deadline = (TRANSFER_BASE + Duration::from_secs(bytes / TRANSFER_RATE)).min(Duration::from_secs(3600));
    tokio::time::timeout(deadline, step).await.unwrap_or_else(|_| {
        Err(object_store::Error::Generic {
            store: "remote",
            source: format!(
                "no whole answer within {} s (a request's whole time is bounded: {} s and a second per {} KiB)",
                deadline.as_secs(),
                TRANSFER_BASE.as_secs(),
                TRANSFER_RATE >> 10
            )
            .into(),
        })
    })
}
const TRANSFER_BASE: Duration = Duration::from_secs(30);
const TRANSFER_RATE: u64 = 256 << 10;

impl ObjectStore {
    /// Connect to `location`. Nothing is requested yet: `check` does that.
    pub fn open(location: &RemoteLocation, options: &RemoteOptions) -> Result<ObjectStore> {
        let client = ClientOptions::new()
            .with_timeout(Duration::from_secs(30))
            .with_connect_timeout(Duration::from_secs(5))
            .with_pool_max_idle_per_host(DOCUMENTS_IN_FLIGHT);
        let retry = RetryConfig { max_retries: 6, retry_timeout: Duration::from_secs(60), ..RetryConfig::default() };
        let invalid = |e: object_store::Error| Error::Invalid(format!("{location}: {e}"));
        let (remote, listing, raw): (Arc<dyn Remote>, _, _) = match location {
            RemoteLocation::S3 { bucket, prefix } => {
                let mut b = object_store::aws::AmazonS3Builder::new()
                    .with_client_options(client.clone())
                    .with_http_connector(MeteredConnector)
                    .with_retry(retry);
                for (key, value) in env_config("AWS_") {
                    b = b.with_config(key, value);
                }
                b = b.with_bucket_name(bucket).with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch);
                if let Some(e) = &options.endpoint {
                    b = b.with_endpoint(e);
                }
                if let Some(r) = options.region.clone().or_else(region_from_env) {
                    b = b.with_region(r);
                }
                if options.no_sign_request {
                    b = b.with_skip_signature(true);
                }
                if options.virtual_hosted {
                    b = b.with_virtual_hosted_style_request(true);
                }
                if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
                    && let Some(c) = profile_credentials()
                {
                    b = b.with_access_key_id(c.0).with_secret_access_key(c.1);
                    if let Some(token) = c.2 {
                        b = b.with_token(token);
                    }
                }
                use object_store::aws::AmazonS3ConfigKey as Key;
                let region = b.get_config_value(&Key::Region).unwrap_or_else(|| "us-east-1".into());
                let virtual_hosted = b.get_config_value(&Key::VirtualHostedStyleRequest).is_some_and(|v| v == "true");
                let sign = b.get_config_value(&Key::SkipSignature).is_none_or(|v| v != "true");
                let base = match (b.get_config_value(&Key::Endpoint), virtual_hosted) {
                    (Some(e), true) => e.trim_end_matches('/').to_string(),
                    (Some(e), false) => format!("{}/{bucket}", e.trim_end_matches('/')),
                    (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
                    (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
                };
                let endpoint = b.get_config_value(&Key::Endpoint);
                if let Some(e) = endpoint.as_deref().filter(|e| e.starts_with("http://"))
                    && b.get_config_value(&Key::Client(object_store::ClientConfigKey::AllowHttp)).is_none_or(|v| v != "true")
                {
                    return Err(Error::Invalid(format!(
                        "{location}: the endpoint {e} is plain HTTP, which sends every request unencrypted: set AWS_ALLOW_HTTP=true to use it"
                    )));
                }
                // Elsewhere than AWS there is no instance metadata to ask: saying so now beats a
                // wait on the metadata address and a vaguer error after it.
                // An AWS endpoint of its own (a VPC endpoint) still has the instance's metadata.
                if let Some(e) = endpoint
                    .filter(|e| sign && !is_aws_endpoint(e) && b.get_config_value(&Key::AccessKeyId).is_none() && !credential_source_set())
                {
                    return Err(Error::Invalid(format!(
                        "{location}: no credentials for the endpoint {e}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, from ~/.aws/credentials), or mount a public bucket with --no-sign-request"
                    )));
                }
                let s3 = Arc::new(b.build().map_err(invalid)?);
                let raw_client = client.with_allow_http(base.starts_with("http://"));
                let raw = listing::RawListing::new(s3.clone(), &raw_client, base, region, prefix.clone(), sign).map_err(invalid)?;
                (prefixed(s3, prefix)?, Listing::Bucket, Some(raw))
            }
            RemoteLocation::Gcs { bucket, prefix } => {
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::new()
                    .with_client_options(client.clone())
                    .with_http_connector(MeteredConnector)
                    .with_retry(retry);
                // GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_SERVICE_ACCOUNT, ...
                for (key, value) in env_config("GOOGLE_") {
                    b = b.with_config(key, value);
                }
                b = b.with_bucket_name(bucket);
                if let Some(e) = &options.endpoint {
                    b = b.with_base_url(e);
                }
                if options.no_sign_request {
                    b = b.with_skip_signature(true);
                }
                (prefixed(Arc::new(b.build().map_err(invalid)?), prefix)?, Listing::Bucket, None)
            }
            RemoteLocation::Azure { container, account, prefix } => {
                let mut b = object_store::azure::MicrosoftAzureBuilder::new()
                    .with_client_options(client.clone())
                    .with_http_connector(MeteredConnector)
                    .with_retry(retry);
                // AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_USE_EMULATOR
                // (Azurite), ...
                for (key, value) in env_config("AZURE_") {
                    b = b.with_config(key, value);
                }
                b = b.with_container_name(container);
                if let Some(a) = account {
                    b = b.with_account(a);
                }
                if let Some(e) = &options.endpoint {
                    b = b.with_endpoint(e.clone()).with_allow_http(e.starts_with("http://"));
                }
                if options.no_sign_request {
                    b = b.with_skip_signature(true);
                }
                (prefixed(Arc::new(b.build().map_err(invalid)?), prefix)?, Listing::Bucket, None)
            }
            RemoteLocation::Http { url } => {
                let allow_http = url.starts_with("http://");
                let http = object_store::http::HttpBuilder::new()
                    .with_url(url)
                    .with_http_connector(MeteredConnector)
                    .with_client_options(client.with_allow_http(allow_http))
                    .with_retry(retry)
                    .build()
                    .map_err(invalid)?;
                (Arc::new(http) as Arc<dyn Remote>, Listing::Consolidated(OnceLock::new()), None)
            }
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("zarrfs-net")
            .enable_all()
            .build()
            .map_err(Error::Io)?;
        let listed = ListedKeys::new(if matches!(listing, Listing::Bucket) { options.metadata_ttl } else { Duration::ZERO });
        Ok(ObjectStore {
            remote,
            raw,
            runtime,
            location: location.clone(),
            listing,
            etags: Mutex::default(),
            chunk_etags: Mutex::new(lru::LruCache::new(CHUNK_ETAGS)),
            listed,
            consolidated: options.consolidated,
            requests: Arc::default(),
            ignores_ranges: Default::default(),
            whole: Mutex::default(),
        })
    }

    pub fn location(&self) -> &RemoteLocation {
        &self.location
    }

    /// `range` of the value `key`, read whole (and kept while it is the value stored) from a
    /// server that ignores Range requests; one too large to read whole is refused.
    fn range_of_whole(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        let Some(head) = self.head(key)? else { return Ok(None) };
        let kept = lock(&self.whole).as_ref().filter(|(k, v, _)| k == key && *v == head.version).map(|(_, v, b)| (*v, b.clone()));
        let (version, bytes) = match kept {
            Some(kept) => kept,
            None => {
                let most = MOST_READ_WHOLE.min(crate::limits::max_chunk_bytes());
                if head.len > most {
                    return Err(Error::Unsupported(format!(
                        "{}: the server ignores Range requests, and the value is {} bytes, more than the {most} a mount reads whole (--max-chunk-size, 256 MiB at most)",
                        crate::error::printable(key),
                        head.len
                    )));
                }
                let Some(value) = self.get_value(key, most)? else { return Ok(None) };
                let bytes: Arc<[u8]> = value.bytes.into();
                *lock(&self.whole) = Some((key.to_string(), value.version, bytes.clone()));
                (value.version, bytes)
            }
        };
        let (start, end) = super::resolve_range(key, range, bytes.len() as u64)?;
        Ok(Some((bytes[start as usize..end as usize].to_vec(), version)))
    }

    fn path(key: &str) -> Result<ObjectPath> {
        ObjectPath::parse(key).map_err(|e| Error::refused(key, format!("not a valid object key: {e}")))
    }

    fn run<T>(&self, fut: impl Future<Output = object_store::Result<T>>) -> object_store::Result<T> {
        self.runtime.block_on(fut)
    }

    /// `run` for a GET: the whole request, body included, runs as a task on the runtime's
    /// threads, where the connection delivers it, and wakes the calling thread once at the end
    /// rather than for every piece of the body that arrives.
    fn run_get<T: Send + 'static>(&self, get: impl Future<Output = object_store::Result<T>> + Send + 'static) -> object_store::Result<T> {
        let task = self.runtime.spawn(get);
        self.runtime.block_on(task).unwrap_or_else(|e| Err(object_store::Error::Generic { store: "S3", source: Box::new(e) }))
    }

    /// A failed request, after the client's retries: logged with the key and the last cause.
    fn failed(&self, op: &str, key: &str, e: object_store::Error) -> Error {
        let why = explain(&e);
        tracing::warn!(store = %self.location, key, "{op} failed: {why}");
        match e {
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. } => {
                Error::refused(key, "changed by another writer since this mount read it; not overwritten")
            }
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                Error::Io(std::io::Error::from_raw_os_error(libc::EACCES))
            }
            _ => Error::Io(std::io::Error::other(format!("{op} {key}: {why}"))),
        }
    }

    fn remember_etag(&self, key: &str, etag: Option<Option<UpdateVersion>>) {
        if !guarded(key) {
            let mut chunks = lock(&self.chunk_etags);
            match etag {
                Some(Some(e)) => {
                    chunks.put(key.to_string(), e);
                }
                _ => {
                    chunks.pop(key);
                }
            }
        } else {
            let mut etags = lock(&self.etags);
            match etag {
                Some(e) => etags.insert(key.to_string(), e),
                None => etags.remove(key),
            };
        }
    }

    /// List every key under the directory `dir`, up to `budget` keys, and keep what the
    /// listing showed, with the node documents among them: each is fetched as soon as the
    /// listing shows it, `DOCUMENTS_IN_FLIGHT` at a time, while the listing goes on — unless
    /// the directory's own consolidated metadata, stored after it, vouches for it. A key
    /// object_store cannot parse, or keys out of order, leave nothing kept.
    fn list_beneath(&self, dir: &str, budget: usize) -> Result<()> {
        let prefix = listed::dir_prefix(dir);
        let path = if dir.is_empty() { None } else { Some(Self::path(dir)?) };
        self.count(&self.requests.list);
        let in_flight = Arc::new(tokio::sync::Semaphore::new(DOCUMENTS_IN_FLIGHT));
        // Documents too large to keep, or beyond the room left, wait to be asked for.
        let mut room = self.listed.room();
        let mut fetches = Vec::new();
        let (own_v3, own_v2) = (format!("{prefix}zarr.json"), format!("{prefix}.zmetadata"));
        // Consolidated metadata a listing above this one found; else the directory's own v3
        // document, asked for with the listing's first page: whether it consolidates is known
        // before the first document the listing shows is fetched.
        let mut consolidation = self.listed.consolidation_above(&prefix);
        let above = consolidation.is_some();
        let own = consolidation
            .is_none()
            .then(|| self.runtime.spawn(fetch_document(self.remote.clone(), own_v3.clone(), MAX_DOCUMENT_BYTES, None)));
        let (listing, fetched, consolidation) = self.runtime.block_on(async {
            let mut own = own;
            let mut early = Vec::new();
            let listing = async {
                let mut stream = self.remote.list(path.as_ref());
                let mut keys = std::collections::BTreeMap::new();
                let mut last = String::new();
                while let Some(meta) = stream.next().await {
                    let meta = meta?;
                    let key = meta.location.as_ref().to_string();
                    // A key object_store encoded reads differently from the key asked for.
                    if key.contains('%') || key <= last || !key.starts_with(&prefix) {
                        return Ok(None);
                    }
                    last.clone_from(&key);
                    let version = UpdateVersion { e_tag: meta.e_tag, version: meta.version };
                    let mut listed = Listed { size: meta.size, version, bytes: None, consolidated: false };
                    if guarded(&key) {
                        if let Some(own) = own.take() {
                            let got = own.await.unwrap_or_else(|e| (Err(join_failed(e)), own_v3.clone()));
                            if let Ok((bytes, meta)) = &got.0 {
                                consolidation = self
                                    .consolidated
                                    .and_then(|read| Consolidation::of(read, "zarr.json", bytes, meta.last_modified.timestamp_millis()))
                                    .map(|c| (prefix.clone(), Arc::new(c)));
                            }
                            early.push(got);
                        }
                        // A v2 directory's consolidated metadata lists before its children.
                        if key == own_v2 && consolidation.is_none() && meta.size <= MAX_DOCUMENT_BYTES {
                            let got = fetch_document(self.remote.clone(), key.clone(), MAX_DOCUMENT_BYTES, None).await;
                            if let Ok((bytes, meta)) = &got.0 {
                                consolidation = self
                                    .consolidated
                                    .and_then(|read| Consolidation::of(read, ".zmetadata", bytes, meta.last_modified.timestamp_millis()))
                                    .map(|c| (prefix.clone(), Arc::new(c)));
                            }
                            early.push(got);
                        } else if key == own_v3 && early.iter().any(|(got, k)| *k == key && got.is_ok()) {
                            // Fetched with the first page.
                        } else if let Some(entry) =
                            consolidation.as_ref().and_then(|(at, c)| c.vouches(at, &key, meta.last_modified.timestamp_millis()))
                            && entry.len() as u64 <= room
                        {
                            room -= entry.len() as u64;
                            listed.bytes = Some(entry);
                            listed.consolidated = true;
                        } else if meta.size <= listed::DOCUMENT_KEPT_MAX
                            && meta.size <= room
                            && !self.listed.has_document(&key, &listed.version)
                        {
                            room -= meta.size;
                            let turn = in_flight.clone();
                            let fetch = fetch_document(self.remote.clone(), key.clone(), listed::DOCUMENT_KEPT_MAX, Some(turn));
                            fetches.push(self.runtime.spawn(fetch));
                        }
                    }
                    keys.insert(key, listed);
                    if keys.len() >= budget {
                        return Ok(Some((keys, false)));
                    }
                }
                Ok::<_, object_store::Error>(Some((keys, true)))
            }
            .await;
            if !matches!(listing, Ok(Some(_))) {
                fetches.iter().for_each(|f| f.abort());
            }
            let mut fetched = early;
            // An empty listing: the directory's document was still asked for.
            if let Some(own) = own {
                fetched.extend(own.await.ok());
            }
            for f in fetches {
                fetched.extend(f.await.ok());
            }
            (listing, fetched, consolidation)
        });
        let (keys, complete) = match listing {
            Ok(Some(listing)) => listing,
            Ok(None) | Err(object_store::Error::InvalidPath { .. }) => {
                self.listed.insert_failed(prefix);
                return Ok(());
            }
            Err(e) => {
                self.listed.insert_failed(prefix);
                return Err(self.failed("LIST", dir, e));
            }
        };
        if let Some((at, c)) = consolidation.filter(|_| !above) {
            self.listed.keep_consolidation(at, c);
        }
        self.listed.insert(prefix, keys, complete);
        for (got, key) in fetched {
            self.count(&self.requests.get);
            match got {
                Ok((bytes, meta)) => {
                    self.requests.bytes_fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    let version = UpdateVersion { e_tag: meta.e_tag, version: meta.version };
                    self.listed.changed(&key, Some(Listed { size: meta.size, version, bytes: Some(bytes), consolidated: false }));
                }
                Err(object_store::Error::NotFound { .. }) => self.listed.changed(&key, None),
                // Asked for again when it is wanted, and its error said then.
                Err(_) => {}
            }
        }
        Ok(())
    }

    fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The names of the nodes the root's consolidated metadata lists (HTTP stores), as keys of
    /// their directories: `a`, `a/b`, ...
    fn consolidated_nodes(&self) -> &[String] {
        let Listing::Consolidated(nodes) = &self.listing else { return &[] };
        nodes.get_or_init(|| {
            let Some(read) = self.consolidated else { return Vec::new() };
            let mut out = Vec::new();
            for name in ["zarr.json", ".zmetadata"] {
                if let Some(documents) = self.get(name, MAX_DOCUMENT_BYTES).ok().flatten().and_then(|b| read(name, &b)) {
                    out.extend(documents.keys().filter_map(|k| k.rsplit_once('/').map(|(dir, _)| dir.to_string())));
                }
            }
            // A name no node can have (empty, `.`, `..` or an empty part: `""`, `/x`) is passed over.
            out.retain(|name| {
                let shown = !name.is_empty() && name.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
                if !shown {
                    tracing::warn!(node = name, "consolidated metadata names a node no path can have: passed over");
                }
                shown
            });
            out.sort();
            out.dedup();
            out
        })
    }
}

/// A cloud's conventional environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as its builder's
/// `from_env` reads it: applied over the client options set here, of which the environment may
/// set some too (`AWS_ALLOW_HTTP`, `GOOGLE_ALLOW_HTTP`).
fn env_config<K: std::str::FromStr>(prefix: &str) -> Vec<(K, String)> {
    std::env::vars()
        .filter(|(key, _)| key.starts_with(prefix))
        .filter_map(|(key, value)| Some((key.to_ascii_lowercase().parse().ok()?, value)))
        .collect()
}

/// The keys of `remote` under `prefix`, as keys relative to it.
fn prefixed<R: Remote>(remote: Arc<R>, prefix: &str) -> Result<Arc<dyn Remote>> {
    if prefix.is_empty() {
        return Ok(remote);
    }
    let prefix = ObjectPath::parse(prefix).map_err(|e| Error::Invalid(e.to_string()))?;
    Ok(Arc::new(object_store::prefix::PrefixStore::new(remote, prefix)))
}

/// What went wrong, in one line a user can act on.
fn explain(e: &object_store::Error) -> String {
    let text = e.to_string();
    // An S3 error document names the cause: `<Code>…</Code><Message>…</Message>`.
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        Some(text[start..].split('<').next()?.to_string())
    };
    let text = match (tag("Code"), tag("Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        _ => text,
    };
    let lower = text.to_ascii_lowercase();
    if lower.contains("nosuchbucket") {
        return "no such bucket".into();
    }
    if matches!(e, object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. })
        // The status as object_store words it ("status 403 Forbidden"), not any "403" (a key or
        // a URL in the message may hold one).
        || lower.contains("403 forbidden")
        || lower.contains("accessdenied")
        || lower.contains("signaturedoesnotmatch")
        || lower.contains("invalidaccesskeyid")
    {
        return format!("access denied (check the credentials, region and endpoint): {}", first_line(&text));
    }
    // The innermost cause says why a request could not be sent ("Connection refused", "invalid
    // peer certificate: UnknownIssuer"); the outer ones only that it was not.
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let cause = first_line(&cause.to_string());
    if cause.to_ascii_lowercase().contains("certificate") {
        return format!("a server's TLS certificate is not trusted (a private CA goes in SSL_CERT_FILE): {cause}");
    }
    if cause.to_ascii_lowercase().contains("timed out") {
        return format!(
            "no whole answer within {} s (a request's whole time is bounded, its body's included, not only each wait): {cause}",
            TRANSFER_BASE.as_secs()
        );
    }
    if lower.contains("error sending request") || lower.contains("connection refused") || lower.contains("dns error") {
        return format!("cannot reach the server (check the endpoint): {cause}");
    }
    first_line(&text)
}

/// A range request the server refused as past the value's end (416, InvalidRange).
fn is_unsatisfiable_range(e: &object_store::Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    // By the status's words, not any "416" (a key or a URL in the message may hold one).
    text.contains("range not satisfiable") || text.contains("invalidrange") || text.contains("wanted range starting")
}

/// Whether the server answered a range request with the whole value (object_store says so
/// in these words: its HTTP store, and its client for the others).
fn ignores_ranges(e: &object_store::Error) -> bool {
    let text = e.to_string();
    text.contains("Range request not supported") || text.contains("non-partial response")
}

fn first_line(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.len() > 400 { format!("{}…", &s[..s.floor_char_boundary(400)]) } else { s }
}

fn region_from_env() -> Option<String> {
    std::env::var("AWS_REGION").ok().or_else(|| std::env::var("AWS_DEFAULT_REGION").ok()).filter(|r| !r.is_empty())
}

/// Whether `endpoint` is one of AWS's own (`*.amazonaws.com`, `*.amazonaws.com.cn`): a VPC
/// or FIPS endpoint, where EC2's instance metadata answers as it does for the default one.
fn is_aws_endpoint(endpoint: &str) -> bool {
    let host = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    let host = host.split(['/', '?']).next().unwrap_or(host);
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = host.split(':').next().unwrap_or(host).trim_end_matches('.').to_ascii_lowercase();
    ["amazonaws.com", "amazonaws.com.cn"].iter().any(|aws| host == *aws || host.ends_with(&format!(".{aws}")))
}

/// Whether the environment names a source of credentials other than keys: web identity, a
/// container's credential service, or an instance metadata address of its own.
fn credential_source_set() -> bool {
    ["AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_METADATA_ENDPOINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
}

/// The access key, secret and session token of `AWS_PROFILE` (default `default`) in the shared
/// credentials file (`AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`).
fn profile_credentials() -> Option<(String, String, Option<String>)> {
    let file = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".aws/credentials")))?;
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    parse_credentials(&std::fs::read_to_string(file).ok()?, &profile)
}

fn parse_credentials(text: &str, profile: &str) -> Option<(String, String, Option<String>)> {
    let (mut section, mut fields) = (String::new(), HashMap::new());
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
        } else if section == profile
            && let Some((k, v)) = line.split_once('=')
        {
            fields.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Some((fields.remove("aws_access_key_id")?, fields.remove("aws_secret_access_key")?, fields.remove("aws_session_token")))
}

/// A value's version from its ETag (or its length alone where the server gives none).
fn version_of(meta: &object_store::ObjectMeta) -> Version {
    version_from(&meta.e_tag, &meta.version, meta.size)
}

fn version_from(e_tag: &Option<String>, version: &Option<String>, size: u64) -> Version {
    Version([etag_digest(e_tag, version), size, 0, 0, 0])
}

/// What of a `Version` names the write: its ETag and version (a GCS generation).
fn etag_digest(e_tag: &Option<String>, version: &Option<String>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    // Servers differ in quoting an ETag in a listing and in a GET's header (rclone's).
    e_tag.as_deref().map(|e| e.trim_matches('"')).hash(&mut h);
    version.hash(&mut h);
    h.finish()
}

impl ObjectStore {
    /// `get_value`, answered from a listing where it can: with `consolidated`, by a document's
    /// consolidated entry too (`get_document`).
    fn get_listed(&self, key: &str, max: u64, consolidated: bool) -> Result<Option<Value>> {
        if guarded(key) {
            // A node document no listing reached: its node's siblings are likely wanted next (a
            // `stat` of every array, a tool opening each), so their directory is listed first.
            // Not the root's own: a mount reads it alone.
            if self.listed.enabled()
                && self.listed.get(key).is_none()
                && let Some((dir, _)) = key.rsplit_once('/')
            {
                let parent = dir.rsplit_once('/').map_or("", |(parent, _)| parent);
                if !self.listed.tried(&listed::dir_prefix(parent)) {
                    // One page: a large array's chunks cost one request more, not five. A
                    // listing that fails leaves the document to be asked for alone.
                    let _ = self.list_beneath(parent, listed::PAGE);
                }
            }
            match self.listed.get(key) {
                Some(None) => {
                    self.remember_etag(key, Some(None));
                    return Ok(None);
                }
                Some(Some(Listed { bytes: Some(bytes), version, size, consolidated: by_entry }))
                    if bytes.len() as u64 <= max && (consolidated || !by_entry) =>
                {
                    let value = Value { bytes: bytes.to_vec(), version: version_from(&version.e_tag, &version.version, size) };
                    self.remember_etag(key, Some(Some(version)));
                    return Ok(Some(value));
                }
                _ => {}
            }
        }
        let path = Self::path(key)?;
        self.count(&self.requests.get);
        let remote = self.remote.clone();
        let got = self.run_get(async move {
            let r = within(0, remote.get_opts(&path, GetOptions::default())).await?;
            // A value larger than its bound is refused before its body is read.
            if r.meta.size > max {
                return Ok(Err(r.meta.size));
            }
            let meta = r.meta.clone();
            Ok(Ok((within(meta.size, r.bytes()).await?, meta)))
        });
        match got {
            Ok(Ok((bytes, meta))) => {
                self.requests.bytes_fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if bytes.len() as u64 > max {
                    return Err(Error::refused(key, format!("more than the {max} bytes it can hold")));
                }
                let version = UpdateVersion { e_tag: meta.e_tag.clone(), version: meta.version.clone() };
                self.remember_etag(key, Some(Some(version.clone())));
                if guarded(key) {
                    self.listed.changed(key, Some(Listed { size: meta.size, version, bytes: Some(bytes.clone()), consolidated: false }));
                }
                Ok(Some(Value { bytes: bytes.into(), version: version_of(&meta) }))
            }
            Ok(Err(size)) => Err(Error::refused(key, format!("{size} bytes, more than the {max} it can hold (not read)"))),
            Err(object_store::Error::NotFound { .. }) => {
                self.remember_etag(key, Some(None));
                Ok(None)
            }
            Err(e) => Err(self.failed("GET", key, e)),
        }
    }
}

impl ObjectStore {
    /// PUT `value` at `key` in `mode`; a refused condition is `Error::Refused`.
    fn put(&self, key: &str, value: &[u8], mode: PutMode) -> Result<Version> {
        if self.location.read_only() {
            return Err(Error::ReadOnly);
        }
        let path = Self::path(key)?;
        self.count(&self.requests.put);
        let updates = matches!(mode, PutMode::Update(_));
        let payload = PutPayload::from(value.to_vec());
        match self.run(self.remote.put_opts(&path, payload, PutOptions { mode, ..PutOptions::default() })) {
            Ok(put) => {
                let version = UpdateVersion { e_tag: put.e_tag.clone(), version: put.version.clone() };
                self.remember_etag(key, Some(Some(version.clone())));
                // A chunk is kept as a name (what a listing of its array's keys shows: a removal
                // deletes it), a document with its bytes.
                let bytes = guarded(key).then(|| bytes::Bytes::copy_from_slice(value));
                self.listed.changed(key, Some(Listed { size: value.len() as u64, version, bytes, consolidated: false }));
                let meta = object_store::ObjectMeta {
                    location: path,
                    last_modified: Default::default(),
                    size: value.len() as u64,
                    e_tag: put.e_tag,
                    version: put.version,
                };
                Ok(version_of(&meta))
            }
            // An update of a value removed since.
            Err(object_store::Error::NotFound { .. }) if updates => {
                Err(Error::refused(key, "removed by another writer since this mount read it"))
            }
            Err(e) => Err(self.failed("PUT", key, e)),
        }
    }

    /// The ETag a conditional PUT over the chunk stored at `version` names: the one kept from
    /// its read or write, else the one it has now (asked for), which must be of that version.
    fn update_version(&self, key: &str, version: Version) -> Result<UpdateVersion> {
        if let Some(kept) = lock(&self.chunk_etags).get(key).filter(|u| etag_digest(&u.e_tag, &u.version) == version.0[0]) {
            return Ok(kept.clone());
        }
        let path = Self::path(key)?;
        self.count(&self.requests.head);
        match self.run(self.remote.head(&path)) {
            Ok(meta) if version_of(&meta) == version => Ok(UpdateVersion { e_tag: meta.e_tag, version: meta.version }),
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {
                Err(Error::conflict(key, "changed by another writer since this mount read it"))
            }
            Err(e) => Err(self.failed("HEAD", key, e)),
        }
    }
}

impl Store for ObjectStore {
    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.get_listed(key, max, false)
    }

    fn get_document(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.get_listed(key, max, true)
    }

    fn head(&self, key: &str) -> Result<Option<Head>> {
        // Documents only: a chunk's version checks the bytes of a read against another writer's.
        if guarded(key)
            && let Some(known) = self.listed.get(key)
        {
            return Ok(known.map(|l| Head { len: l.size, version: version_from(&l.version.e_tag, &l.version.version, l.size) }));
        }
        self.head_current(key)
    }

    fn head_current(&self, key: &str) -> Result<Option<Head>> {
        let path = Self::path(key)?;
        self.count(&self.requests.head);
        match self.run(self.remote.head(&path)) {
            Ok(meta) => Ok(Some(Head { len: meta.size, version: version_of(&meta) })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed("HEAD", key, e)),
        }
    }

    fn get_range_versioned(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        if let (ByteRange::Suffix(n), RemoteLocation::Azure { .. }) = (range, &self.location)
            && n > 0
        {
            // Azure Blob has no suffix ranges: the value's length first, then its last bytes,
            // which must be of the value that length was of.
            let Some(head) = self.head(key)? else { return Ok(None) };
            let (start, end) = super::resolve_range(key, range, head.len)?;
            let got = self.get_range_versioned(key, ByteRange::Range { start, len: end - start })?;
            return match got {
                Some((_, version)) if version != head.version => Err(Error::Stale(format!("{key} changed while it was read"))),
                other => Ok(other),
            };
        }
        if self.ignores_ranges.load(Ordering::Relaxed) {
            return self.range_of_whole(key, range);
        }
        let asked = range;
        let path = Self::path(key)?;
        let range = match range {
            // An empty range asks only whether the value exists.
            ByteRange::Range { len: 0, .. } | ByteRange::Suffix(0) => return Ok(self.head(key)?.map(|h| (Vec::new(), h.version))),
            ByteRange::Range { start, len } => GetRange::Bounded(start..start.saturating_add(len)),
            ByteRange::Suffix(n) => GetRange::Suffix(n),
        };
        let want = range.clone();
        let most = match &range {
            GetRange::Bounded(r) => r.end - r.start,
            GetRange::Suffix(n) => *n,
            GetRange::Offset(_) => u64::MAX,
        };
        self.count(&self.requests.ranged_get);
        let remote = self.remote.clone();
        let got = self.run_get(async move {
            within(most, async {
                let r = remote.get_opts(&path, GetOptions { range: Some(range), ..GetOptions::default() }).await?;
                let meta = r.meta.clone();
                Ok((r.bytes().await?, meta))
            })
            .await
        });
        match got {
            Ok((bytes, meta)) => {
                let size = meta.size;
                self.requests.bytes_fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                // A server answers a range past the end with what there is: the store contract
                // says such a range is an error.
                let expected = match want {
                    GetRange::Bounded(r) => r.end - r.start,
                    GetRange::Suffix(n) => n,
                    GetRange::Offset(o) => size.saturating_sub(o),
                };
                if bytes.len() as u64 != expected {
                    return Err(Error::corrupt(key, format!("a range of {expected} bytes of a {size}-byte value is past its end")));
                }
                Ok(Some((bytes.into(), version_of(&meta))))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) if is_unsatisfiable_range(&e) => Err(Error::corrupt(key, format!("range past the end: {}", first_line(&e.to_string())))),
            Err(e) if ignores_ranges(&e) => {
                tracing::info!(key = %crate::error::printable(key), "the server ignores Range requests: values are read whole");
                self.ignores_ranges.store(true, Ordering::Relaxed);
                self.range_of_whole(key, asked)
            }
            Err(e) => Err(self.failed("GET (range)", key, e)),
        }
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<Version> {
        let mode = match lock(&self.etags).get(key).filter(|_| guarded(key)) {
            Some(Some(seen)) => PutMode::Update(seen.clone()),
            Some(None) => PutMode::Create,
            None => PutMode::Overwrite,
        };
        self.put(key, value, mode)
    }

    fn set_if(&self, key: &str, value: &[u8], expect: Expect) -> Result<Version> {
        let mode = match expect {
            Expect::Any => PutMode::Overwrite,
            Expect::Absent => PutMode::Create,
            Expect::At(version) => PutMode::Update(self.update_version(key, version)?),
        };
        self.put(key, value, mode).map_err(|e| match e {
            Error::Refused { key, .. } => {
                Error::conflict(key, "changed by another writer since this mount read it (conditional PUT refused)")
            }
            other => other,
        })
    }

    /// Only what is absent: object storage has no conditional DELETE (`deletes_conditionally`).
    fn delete_if(&self, key: &str, expect: Expect) -> Result<()> {
        match expect {
            Expect::Any => self.delete(key),
            Expect::Absent => match self.head_current(key)? {
                None => Ok(()),
                Some(_) => Err(Error::conflict(key, "written by another writer since this mount saw it absent")),
            },
            Expect::At(_) => Err(Error::Unsupported(format!("{key}: object storage deletes no value conditionally"))),
        }
    }

    fn deletes_conditionally(&self) -> bool {
        false
    }

    fn delete(&self, key: &str) -> Result<()> {
        if self.location.read_only() {
            return Err(Error::ReadOnly);
        }
        let path = Self::path(key)?;
        self.count(&self.requests.delete);
        match self.run(self.remote.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                self.remember_etag(key, Some(None));
                self.listed.changed(key, None);
                Ok(())
            }
            Err(e) => Err(self.failed("DELETE", key, e)),
        }
    }

    fn delete_many(&self, keys: &[String]) -> Result<()> {
        if self.location.read_only() {
            return Err(Error::ReadOnly);
        }
        self.listed.clear();
        let paths: Vec<object_store::Result<ObjectPath>> = keys.iter().map(|k| Ok(ObjectPath::from(k.as_str()))).collect();
        let n = paths.len() as u64;
        let deleted = self.run(async {
            let mut stream = self.remote.delete_stream(futures_util::stream::iter(paths).boxed());
            while let Some(result) = stream.next().await {
                match result {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        self.requests.delete.fetch_add(n, Ordering::Relaxed);
        for k in keys {
            self.remember_etag(k, Some(None));
        }
        deleted.map_err(|e| self.failed("DELETE", keys.first().map_or("", String::as_str), e))
    }

    fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        if self.location.read_only() {
            return Err(Error::ReadOnly);
        }
        let dir = Self::path(prefix)?;
        self.listed.clear();
        self.count(&self.requests.list);
        let locations = self.remote.list(Some(&dir)).map(|m| m.map(|m| m.location)).boxed();
        let removed = self.run(async {
            let mut deleted = self.remote.delete_stream(locations);
            let mut n = 0;
            while let Some(result) = deleted.next().await {
                match result {
                    Ok(_) => n += 1,
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(n)
        });
        self.requests.delete.fetch_add(removed.as_ref().map_or(0, |n| *n), Ordering::Relaxed);
        removed.map_err(|e| self.failed("DELETE", prefix, e))
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        if let Listing::Consolidated(_) = self.listing {
            // Without a listing, a directory holds the nodes consolidated metadata names (the
            // node documents themselves are found by asking for them).
            let lead = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
            let mut out: Vec<Entry> = self
                .consolidated_nodes()
                .iter()
                .filter_map(|n| n.strip_prefix(lead.as_str()))
                .filter_map(|rest| rest.split('/').next())
                .map(|name| Entry { name: name.to_string(), is_dir: true })
                .collect();
            out.dedup();
            for name in GUARDED {
                if self.head(&super::join(prefix, name))?.is_some() {
                    out.push(Entry { name: name.to_string(), is_dir: false });
                }
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            return Ok(out);
        }
        // A walk lists each directory: one listing of everything beneath the first answers for
        // the rest, and fetches their documents at once.
        if self.listed.enabled() {
            if let Some(entries) = self.listed.dir(prefix) {
                return Ok(entries);
            }
            // A listing that stopped short of this directory's end (a large array's chunks) is
            // not made again within the TTL: the directory is listed alone.
            if !self.listed.tried(&listed::dir_prefix(prefix)) {
                self.list_beneath(prefix, listed::LISTING_BUDGET)?;
                if let Some(entries) = self.listed.dir(prefix) {
                    return Ok(entries);
                }
            }
        }
        let dir = if prefix.is_empty() { None } else { Some(Self::path(prefix)?) };
        self.count(&self.requests.list);
        let listed = match self.run(self.remote.list_with_delimiter(dir.as_ref())) {
            // A key object_store cannot parse: listed again, passing over what cannot be shown.
            Err(object_store::Error::InvalidPath { .. }) if let Some(raw) = &self.raw => {
                let names = self.runtime.block_on(raw.list(prefix)).map_err(|e| Error::Io(std::io::Error::other(e)))?;
                let mut out: Vec<Entry> = names.dirs.into_iter().map(|name| Entry { name, is_dir: true }).collect();
                out.extend(names.files.into_iter().map(|name| Entry { name, is_dir: false }));
                out.sort_by(|a, b| a.name.cmp(&b.name));
                return Ok(out);
            }
            other => other.map_err(|e| self.failed("LIST", prefix, e))?,
        };
        let name = |p: &ObjectPath| p.filename().map(str::to_string);
        let mut out: Vec<Entry> = listed
            .common_prefixes
            .iter()
            .filter_map(name)
            .map(|name| Entry { name, is_dir: true })
            .chain(listed.objects.iter().filter_map(|o| name(&o.location)).map(|name| Entry { name, is_dir: false }))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn list_names_upto(&self, prefix: &str, max: usize) -> Result<Option<Vec<String>>> {
        if let Listing::Consolidated(_) = self.listing {
            return Ok(None);
        }
        let dir = if prefix.is_empty() { None } else { Some(Self::path(prefix)?) };
        // A recursive listing, stopped as soon as it shows more names than `max` or more keys
        // than a few pages: it costs what the answer is worth, however large the prefix.
        let budget = max.saturating_mul(16).max(1000);
        self.count(&self.requests.list);
        let names = self.run(async {
            let mut stream = self.remote.list(dir.as_ref());
            let (mut names, mut seen) = (std::collections::BTreeSet::new(), 0usize);
            while let Some(meta) = stream.next().await {
                let meta = meta?;
                seen += 1;
                let rest: Vec<_> = meta.location.prefix_match(&dir.clone().unwrap_or_default()).into_iter().flatten().collect();
                if let Some(first) = rest.first() {
                    names.insert(first.as_ref().to_string());
                }
                if names.len() > max || seen > budget {
                    return Ok(None);
                }
            }
            Ok(Some(names.into_iter().collect::<Vec<_>>()))
        });
        match names {
            // A key object_store cannot parse: the caller probes each key instead.
            Err(object_store::Error::InvalidPath { .. }) => Ok(None),
            other => other.map_err(|e| self.failed("LIST", prefix, e)),
        }
    }

    fn move_value(&self, from: &str, to: &str) -> Result<()> {
        if self.location.read_only() {
            return Err(Error::ReadOnly);
        }
        let (source, target) = (Self::path(from)?, Self::path(to)?);
        self.listed.clear();
        // A copy the server makes, then the deletion: a crash between them leaves both.
        self.count(&self.requests.put);
        match self.run(self.remote.copy(&source, &target)) {
            Ok(()) => self.remember_etag(to, None),
            Err(object_store::Error::NotFound { .. }) => return Err(Error::NotFound),
            Err(e) => return Err(self.failed("COPY", from, e)),
        }
        self.delete(from)
    }

    fn usage(&self, prefix: &str, most: u64) -> Result<Option<Usage>> {
        if let Listing::Consolidated(_) = self.listing {
            return Ok(None);
        }
        let dir = if prefix.is_empty() { None } else { Some(Self::path(prefix)?) };
        self.count(&self.requests.list);
        let usage = self.run(async {
            let mut stream = self.remote.list(dir.as_ref());
            let mut usage = Usage { complete: true, ..Usage::default() };
            while let Some(meta) = stream.next().await {
                let meta = meta?;
                if usage.values >= most {
                    usage.complete = false;
                    break;
                }
                usage.values += 1;
                usage.bytes += meta.size;
            }
            Ok(usage)
        });
        match usage {
            // A key object_store cannot parse: no count rather than a wrong one.
            Err(object_store::Error::InvalidPath { .. }) => Ok(None),
            other => other.map(Some).map_err(|e| self.failed("LIST", prefix, e)),
        }
    }

    fn hold_lock(self: Arc<Self>, key: &str, wait: Duration) -> Result<super::Held> {
        super::lease::take(self, key, wait)
    }

    fn sync(&self, _keys: &[String]) -> Result<()> {
        // A PUT that returned is durable.
        Ok(())
    }

    fn requests(&self) -> Option<serde_json::Value> {
        Some(self.requests.to_json())
    }

    fn reach(&self) -> std::result::Result<(), String> {
        let probe = async {
            match self.location {
                RemoteLocation::S3 { .. } | RemoteLocation::Gcs { .. } | RemoteLocation::Azure { .. } => {
                    self.remote.list_with_delimiter(None).await.map(|_| ())
                }
                // Plain HTTP: the root's metadata, absent or not, proves the server answers.
                RemoteLocation::Http { .. } => match self.remote.head(&ObjectPath::from("zarr.json")).await {
                    Err(object_store::Error::NotFound { .. }) => Ok(()),
                    other => other.map(|_| ()),
                },
            }
        };
        match self.runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), probe).await }) {
            // A key object_store cannot parse came back: the bucket answered.
            Ok(Ok(())) | Ok(Err(object_store::Error::InvalidPath { .. })) => Ok(()),
            Ok(Err(e)) => Err(explain(&e)),
            Err(_) => Err("no answer within 60 s".into()),
        }
    }
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore").field("location", &self.location).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_endpoints_are_told_from_others_by_their_host() {
        for aws in [
            "https://s3.eu-west-1.amazonaws.com",
            "https://bucket.vpce-1a2b.s3.us-east-1.vpce.amazonaws.com/",
            "https://s3.cn-north-1.amazonaws.com.cn:443",
        ] {
            assert!(is_aws_endpoint(aws), "{aws}");
        }
        for other in ["http://127.0.0.1:9000", "https://minio.example.org", "https://amazonaws.com.evil.org", "https://x@notamazonaws.com/"]
        {
            assert!(!is_aws_endpoint(other), "{other}");
        }
    }

    #[test]
    fn profile_credentials_are_read_from_their_section() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key=B\n\n[other]\naws_access_key_id=C\naws_secret_access_key = D\naws_session_token = T\n";
        assert_eq!(parse_credentials(text, "default"), Some(("A".into(), "B".into(), None)));
        assert_eq!(parse_credentials(text, "other"), Some(("C".into(), "D".into(), Some("T".into()))));
        assert_eq!(parse_credentials(text, "missing"), None);
    }

    #[test]
    fn a_request_that_was_not_sent_is_explained_by_its_innermost_cause() {
        /// An outer error that only says a request to a URL failed, over the cause.
        #[derive(Debug)]
        struct NotSent(&'static str, std::io::Error);
        impl std::fmt::Display for NotSent {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "Error performing HEAD {} - HTTP error: error sending request", self.0)
            }
        }
        impl std::error::Error for NotSent {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.1)
            }
        }
        let not_sent = |url: &'static str, cause: &str| object_store::Error::Generic {
            store: "S3",
            source: Box::new(NotSent(url, std::io::Error::other(cause.to_string()))),
        };
        let untrusted = explain(&not_sent("https://h/b/p/zarr.json", "invalid peer certificate: UnknownIssuer"));
        assert_eq!(
            untrusted,
            "a server's TLS certificate is not trusted (a private CA goes in SSL_CERT_FILE): invalid peer certificate: UnknownIssuer"
        );
        let refused = explain(&not_sent("https://h/b/p/zarr.json", "Connection refused (os error 111)"));
        assert_eq!(refused, "cannot reach the server (check the endpoint): Connection refused (os error 111)");
        // A "403" in the URL is not a refusal (a CI run's random prefix held one).
        let in_url = explain(&not_sent("https://127.0.0.1:42333/b/http-486b4038/zarr.json", "invalid peer certificate: UnknownIssuer"));
        assert!(in_url.starts_with("a server's TLS certificate is not trusted"), "{in_url}");
        let forbidden = object_store::Error::Generic { store: "HTTP", source: "Client error with status 403 Forbidden: No Body".into() };
        assert!(explain(&forbidden).starts_with("access denied"), "{}", explain(&forbidden));
        // Likewise a "416" in the URL is not a range past the end.
        assert!(!is_unsatisfiable_range(&not_sent("https://h/b/c/416/0", "Connection reset by peer")));
        let past_end =
            object_store::Error::Generic { store: "HTTP", source: "Client error with status 416 Range Not Satisfiable: No Body".into() };
        assert!(is_unsatisfiable_range(&past_end));
    }

    #[test]
    fn only_node_documents_are_guarded() {
        assert!(guarded("a/b/zarr.json") && guarded(".zattrs") && guarded("x/.zmetadata"));
        assert!(!guarded("a/c/0/0") && !guarded("a/0.0"));
    }
}
