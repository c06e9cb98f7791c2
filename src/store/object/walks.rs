//! Walks on object storage: a node document no listing reached is asked for alone while its
//! directory's siblings are listed in one go (`Lister`), the documents the listing shows fetched many at a time or
//! taken from the consolidated metadata that vouches for them, and kept (`listed`) for the
//! metadata TTL (walks answered from consolidated metadata alone are `trusted`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, ObjectStore as Remote, UpdateVersion};

use super::listed::{self, Consolidation, Listed};
use super::versions::{version_from, version_of};
use super::{DOCUMENTS_IN_FLIGHT, ObjectStore, guarded, within};
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::store::Value;
use crate::{Error, Result};

/// The document `key`, fetched whole if it holds no more than `max` bytes (one grown past what
/// a listing showed, a hostile server's endless body included, is not read: it waits to be
/// asked for, bounded then), once `turn` gives a place among the requests in flight.
pub(super) async fn fetch_document(
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

pub(super) fn join_failed(e: tokio::task::JoinError) -> object_store::Error {
    object_store::Error::Generic { store: "listing", source: Box::new(e) }
}

/// What a listing of a directory beneath needs: owned, so that it can run on the runtime by
/// itself (a lookup's listing of its siblings goes on while the lookup is answered).
#[derive(Clone)]
pub(super) struct Lister {
    remote: Arc<dyn Remote>,
    listed: Arc<listed::ListedKeys>,
    requests: Arc<super::RequestCounts>,
    consolidated: Option<crate::store::ReadConsolidated>,
}

impl Lister {
    /// List every key under the directory `dir`, up to `budget` keys, and keep what the
    /// listing showed, with the node documents among them: each is fetched as soon as the
    /// listing shows it, `DOCUMENTS_IN_FLIGHT` at a time, while the listing goes on — unless
    /// the directory's own consolidated metadata, stored after it, vouches for it. A key
    /// object_store cannot parse, or keys out of order, leave nothing kept; a listing that
    /// fails leaves nothing kept either, and is not tried again within the TTL.
    async fn list(self, dir: String, budget: usize) -> object_store::Result<()> {
        let prefix = listed::dir_prefix(&dir);
        let path = if dir.is_empty() { None } else { Some(ObjectPath::parse(&dir)?) };
        let started = self.listed.started();
        self.requests.list.fetch_add(1, Ordering::Relaxed);
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
        let mut own =
            consolidation.is_none().then(|| tokio::spawn(fetch_document(self.remote.clone(), own_v3.clone(), MAX_DOCUMENT_BYTES, None)));
        // The directory's own document `name`, fetched: what it consolidates, if anything.
        let consolidates = |name: &str, got: &object_store::Result<(bytes::Bytes, object_store::ObjectMeta)>| {
            let (bytes, meta) = got.as_ref().ok()?;
            let c = Consolidation::of(self.consolidated?, name, bytes, meta.last_modified.timestamp_millis())?;
            Some((prefix.clone(), Arc::new(c)))
        };
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
                        consolidation = consolidates("zarr.json", &got.0);
                        early.push(got);
                    }
                    // A v2 directory's consolidated metadata lists before its children.
                    if key == own_v2 && consolidation.is_none() && meta.size <= MAX_DOCUMENT_BYTES {
                        let got = fetch_document(self.remote.clone(), key.clone(), MAX_DOCUMENT_BYTES, None).await;
                        consolidation = consolidates(".zmetadata", &got.0);
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
                        fetches.push(tokio::spawn(fetch_document(self.remote.clone(), key.clone(), listed::DOCUMENT_KEPT_MAX, Some(turn))));
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
        let (mut keys, complete) = match listing {
            Ok(Some(listing)) => listing,
            Ok(None) | Err(object_store::Error::InvalidPath { .. }) => {
                self.listed.insert_failed(prefix);
                return Ok(());
            }
            Err(e) => {
                self.listed.insert_failed(prefix);
                return Err(e);
            }
        };
        // The documents fetched go in with the listing, so that what the mount changed since
        // it started is laid over them too.
        for (got, key) in fetched {
            self.requests.get.fetch_add(1, Ordering::Relaxed);
            if let Ok((bytes, _)) = &got {
                self.requests.bytes_fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            let Some(listed) = keys.get_mut(&key) else { continue };
            match got {
                Ok((bytes, meta)) => {
                    let version = UpdateVersion { e_tag: meta.e_tag, version: meta.version };
                    let bytes = (bytes.len() as u64 <= listed::DOCUMENT_KEPT_MAX).then_some(bytes);
                    *listed = Listed { size: meta.size, version, bytes, consolidated: false };
                }
                Err(object_store::Error::NotFound { .. }) => {
                    keys.remove(&key);
                }
                // Asked for again when it is wanted, and its error said then.
                Err(_) => {}
            }
        }
        if let Some((at, c)) = consolidation.filter(|_| !above) {
            self.listed.keep_consolidation(at, c);
        }
        self.listed.insert(prefix, keys, complete, started);
        Ok(())
    }
}

impl ObjectStore {
    fn lister(&self) -> Lister {
        Lister {
            remote: self.remote.clone(),
            listed: self.listed.clone(),
            requests: self.requests.clone(),
            consolidated: self.consolidated,
        }
    }

    /// `Lister::list`, waited for.
    pub(super) fn list_beneath(&self, dir: &str, budget: usize) -> Result<()> {
        if !dir.is_empty() {
            Self::path(dir)?;
        }
        self.runtime.block_on(self.lister().list(dir.to_string(), budget)).map_err(|e| self.failed("LIST", dir, e))
    }

    /// `get_value`, answered from a listing where it can: with `consolidated`, by a document's
    /// consolidated entry too (`get_document`).
    pub(super) fn get_listed(&self, key: &str, max: u64, consolidated: bool) -> Result<Option<Value>> {
        if guarded(key) {
            // A node document no listing reached: its node's siblings are likely wanted next (a
            // `stat` of every array, a tool opening each), so their directory is listed first.
            // Not the root's own: a mount reads it alone.
            if self.listed.enabled()
                && self.listed.get(key).is_none()
                && let Some((dir, _)) = key.rsplit_once('/')
            {
                let parent = dir.rsplit_once('/').map_or("", |(parent, _)| parent);
                let siblings = listed::dir_prefix(parent);
                if !self.listed.tried(&siblings) && self.listed.start_background_listing(&siblings) {
                    // One page (a large array's chunks cost one request more, not five), listed
                    // on the runtime while this document is asked for alone: a tool reading one
                    // array waits one round trip, not a page of keys and then their documents.
                    // Until the listing is kept the directory counts as tried, so a sibling's
                    // lookup meanwhile is asked for alone too, not listed again (nor a
                    // directory beneath it).
                    let (lister, parent) = (self.lister(), parent.to_string());
                    self.runtime.spawn(async move {
                        let listed = lister.listed.clone();
                        if let Err(e) = lister.list(parent, listed::PAGE).await {
                            tracing::debug!("a listing of a lookup's siblings failed: {}", super::errors::explain(&e));
                        }
                        listed.listed_in_background(&siblings);
                    });
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
        self.get_fresh(key, max)
    }

    /// A directory's document read alone (the root's, as a mount starts; a lookup's) that
    /// consolidates the hierarchy beneath it: kept as a listing's is, so that the listings of
    /// directories below it take their documents from it.
    fn keep_if_consolidating(&self, key: &str, bytes: &[u8], meta: &object_store::ObjectMeta) {
        let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
        let Some(read) = self.consolidated.filter(|_| self.listed.enabled()) else { return };
        // Most documents consolidate nothing: the JSON is parsed only where it may.
        let may = match name {
            ".zmetadata" => true,
            "zarr.json" => bytes.windows(22).any(|w| w == b"consolidated_metadata\""),
            _ => false,
        };
        if !may {
            return;
        }
        if let Some(c) = Consolidation::of(read, name, bytes, meta.last_modified.timestamp_millis()) {
            self.listed.keep_consolidation(listed::dir_prefix(dir), Arc::new(c));
        }
    }

    /// `key`'s value asked of the store itself, whatever a listing showed; what it answers
    /// replaces what was listed.
    pub(super) fn get_fresh(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.refuse_timed_out(key)?;
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
                self.keep_if_consolidating(key, &bytes, &meta);
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
