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
//!
//! This file is the `Store` over a client: reads, writes, deletes, listings. How the client is
//! built is `client`; what a failure says, `errors`; versions and conditional PUTs, `versions`;
//! walks answered from listings, `walks` (and what they showed, `listed`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore as Remote, ObjectStoreExt, PutMode, UpdateVersion};

mod client;
mod errors;
mod listed;
mod metered;
mod raw;
mod trusted;
mod versions;
mod walks;
mod whole;

use listed::ListedKeys;

use super::{ByteRange, Entry, Expect, Head, ReadConsolidated, RemoteLocation, RemoteOptions, Store, Usage, Value, Version};
use crate::error::lock;
use crate::{Error, Result};
use errors::{explain, first_line, ignores_ranges, is_unsatisfiable_range};
use versions::{version_from, version_of};

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
    /// Plain HTTP cannot list: a directory holds what the root's consolidated metadata says
    /// (`trusted`), else only the node documents found by asking for them.
    Unavailable,
}

pub struct ObjectStore {
    remote: Arc<dyn Remote>,
    /// A bucket's listings where object_store cannot parse a key (S3 only).
    raw: Option<raw::RawRequests>,
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
    listed: Arc<ListedKeys>,
    /// Walks answered from the root's consolidated metadata (plain HTTP; a bucket mounted with
    /// `--trust-consolidated`), not from listings.
    trust: Option<trusted::Trust>,
    /// How a directory's consolidated metadata is read (the format layer's).
    consolidated: Option<ReadConsolidated>,
    pub requests: Arc<RequestCounts>,
    /// The server answered a range with the whole value (`python -m http.server`): values are
    /// read whole, and kept for the ranges asked of them.
    ignores_ranges: std::sync::atomic::AtomicBool,
    whole: whole::WholeValues,
    /// Whether the server keeps `If-Match` on a DELETE, once probed.
    conditional_deletes: std::sync::OnceLock<bool>,
    /// Keys whose last read ran out of its whole time, and when (`errors::TIMED_OUT_FOR`).
    timed_out: Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// The most a value of a server that ignores Range requests is read whole (and at most
/// `--max-chunk-size`).
const MOST_READ_WHOLE: u64 = 256 << 20;

/// Chunks whose ETags are kept for conditional PUTs (some 100 bytes each).
const CHUNK_ETAGS: std::num::NonZeroUsize = std::num::NonZeroUsize::new(1 << 16).unwrap();

/// Documents fetched at once after a listing: a walk then finds them read.
const DOCUMENTS_IN_FLIGHT: usize = 128;

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
        let (remote, listing, raw) = client::connect(location, options)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("zarrfs-net")
            .enable_all()
            .build()
            .map_err(Error::Io)?;
        let trusts = matches!(listing, Listing::Unavailable) || options.trust_consolidated;
        // Kept for the TTL where listings can be made: a trusting mount lists an array's chunks,
        // and every directory of a root that consolidates nothing.
        let listable = !matches!(listing, Listing::Unavailable);
        let listed = Arc::new(ListedKeys::new(if listable { options.metadata_ttl } else { Duration::ZERO }));
        Ok(ObjectStore {
            remote,
            raw,
            runtime,
            location: location.clone(),
            listing,
            etags: Mutex::default(),
            chunk_etags: Mutex::new(lru::LruCache::new(CHUNK_ETAGS)),
            listed,
            trust: trusts.then(|| trusted::Trust::new(options.metadata_ttl)),
            consolidated: options.consolidated,
            requests: Arc::default(),
            ignores_ranges: Default::default(),
            whole: whole::WholeValues::new(options.whole_values_budget.unwrap_or(1 << 30)),
            timed_out: Mutex::default(),
            conditional_deletes: std::sync::OnceLock::new(),
        })
    }

    pub fn location(&self) -> &RemoteLocation {
        &self.location
    }

    /// `range` of the value `key`, read whole (and kept while it is the value stored) from a
    /// server that ignores Range requests; one too large to read whole is refused.
    fn range_of_whole(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        let Some(head) = self.head(key)? else { return Ok(None) };
        let most = MOST_READ_WHOLE.min(crate::limits::max_chunk_bytes());
        if head.len > most {
            return Err(Error::Unsupported(format!(
                "{}: the server ignores Range requests, and the value is {} bytes, more than the {most} a mount reads whole (--max-chunk-size, 256 MiB at most)",
                crate::error::printable(key),
                head.len
            )));
        }
        let fetch = || Ok(self.get_value(key, most)?.map(|value| (value.version, Arc::from(value.bytes))));
        let Some((version, bytes)) = self.whole.get(key, head.version, fetch)? else { return Ok(None) };
        let (start, end) = super::resolve_range(key, range, bytes.len() as u64)?;
        Ok(Some((bytes[start as usize..end as usize].to_vec(), version)))
    }

    /// Whether the server keeps `If-Match` on a DELETE: a probe object of its own, deleted over
    /// an ETag it does not have (412 expected), then deleted.
    fn probe_conditional_delete(&self, raw: &raw::RawRequests) -> std::result::Result<bool, String> {
        let key = format!(
            ".zarrfs-delete-probe-{}-{}.tmp",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        );
        debug_assert!(super::is_temporary(&key));
        let path = Self::path(&key).map_err(|e| e.to_string())?;
        self.run(self.remote.put(&path, bytes::Bytes::from_static(b"probe").into())).map_err(|e| explain(&e))?;
        // An ETag and a generation no value has.
        let other = UpdateVersion { e_tag: Some("\"00000000000000000000000000000000\"".into()), version: Some("1".into()) };
        let asked = self.runtime.block_on(raw.delete_if_match(&key, &other));
        let _ = self.run(self.remote.delete(&path));
        Ok(asked? == raw::Deleted::OtherVersion)
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

    fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Store for ObjectStore {
    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.get_listed(key, max, false)
    }

    fn get_document(&self, key: &str, max: u64) -> Result<Option<Value>> {
        if guarded(key)
            && let Some(trusted) = self.trusted()?
        {
            return match trusted.document(key) {
                Some(v) if v.bytes.len() as u64 > max => Err(Error::refused(key, format!("more than the {max} bytes it can hold"))),
                other => Ok(other),
            };
        }
        self.get_listed(key, max, true)
    }

    fn get_current(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.get_fresh(key, max)
    }

    fn head(&self, key: &str) -> Result<Option<Head>> {
        // Documents only: a chunk's version checks the bytes of a read against another writer's.
        if guarded(key)
            && let Some(trusted) = self.trusted()?
        {
            return Ok(trusted.head(key));
        }
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
        self.refuse_timed_out(key)?;
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

    /// Over a version: `If-Match` (S3, Azure) or the generation (GCS) on the DELETE, where the
    /// server keeps it (`deletes_conditionally`).
    fn delete_if(&self, key: &str, expect: Expect) -> Result<()> {
        match expect {
            Expect::Any => self.delete(key),
            Expect::Absent => match self.head_current(key)? {
                None => Ok(()),
                Some(_) => Err(Error::conflict(key, "written by another writer since this mount saw it absent")),
            },
            Expect::At(version) => {
                let (Some(raw), true) = (&self.raw, self.deletes_conditionally()) else {
                    return Err(Error::Unsupported(format!("{key}: this object store deletes no value conditionally")));
                };
                let over = self.update_version(key, version)?;
                self.count(&self.requests.delete);
                match self.runtime.block_on(raw.delete_if_match(key, &over)) {
                    Ok(raw::Deleted::Yes) => {
                        self.remember_etag(key, Some(None));
                        self.listed.changed(key, None);
                        Ok(())
                    }
                    Ok(_) => Err(Error::conflict(key, "changed by another writer since this mount read it (conditional DELETE refused)")),
                    Err(e) => Err(Error::Io(std::io::Error::other(e))),
                }
            }
        }
    }

    /// On S3 (If-Match on DeleteObject, since 2025), Azure (If-Match on Delete Blob) and GCS
    /// (`x-goog-if-generation-match`), once a probe showed the server keeps the condition: a
    /// server that deletes regardless of it (or refuses it) gets chunks of fill stored instead,
    /// said once.
    fn deletes_conditionally(&self) -> bool {
        let Some(raw) = &self.raw else { return false };
        if self.location.read_only() {
            return false;
        }
        *self.conditional_deletes.get_or_init(|| {
            let kept = self.probe_conditional_delete(raw);
            match &kept {
                Ok(true) => tracing::debug!(store = %self.location, "the server deletes conditionally"),
                Ok(false) => tracing::info!(store = %self.location, "the server deletes regardless of a DELETE's condition: chunks made all fill are stored as fill, not deleted"),
                Err(e) => tracing::info!(store = %self.location, "no conditional deletes ({e}): chunks made all fill are stored as fill, not deleted"),
            }
            kept.unwrap_or(false)
        })
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
        // Again after: a listing that ran beside the deletes may show some of the keys.
        self.listed.clear();
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
        self.listed.clear();
        removed.map_err(|e| self.failed("DELETE", prefix, e))
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        if let Some(trusted) = self.trusted()?
            && let Some(entries) = trusted.dir(prefix)
        {
            return Ok(entries);
        }
        if let Listing::Unavailable = self.listing {
            return self.documents_asked(prefix);
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
        if let Listing::Unavailable = self.listing {
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
        let copied = self.run(self.remote.copy(&source, &target));
        // Again after: a listing that ran beside the copy may not show its target.
        self.listed.clear();
        match copied {
            Ok(()) => self.remember_etag(to, None),
            Err(object_store::Error::NotFound { .. }) => return Err(Error::NotFound),
            Err(e) => return Err(self.failed("COPY", from, e)),
        }
        self.delete(from)
    }

    fn usage(&self, prefix: &str, most: u64) -> Result<Option<Usage>> {
        if let Listing::Unavailable = self.listing {
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

    fn requests_are_round_trips(&self) -> bool {
        true
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
    fn only_node_documents_are_guarded() {
        assert!(guarded("a/b/zarr.json") && guarded(".zattrs") && guarded("x/.zmetadata"));
        assert!(!guarded("a/c/0/0") && !guarded("a/0.0"));
    }
}
