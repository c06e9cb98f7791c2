//! Versions and conditional writes: a value's version from its ETag (and GCS generation), the
//! ETags remembered from reads and writes (documents all, chunks the most recent), and the PUT
//! that names them, so that another writer's change is refused rather than replaced.

use object_store::{ObjectStore as Remote, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::listed::Listed;
use super::{ObjectStore, guarded};
use crate::error::lock;
use crate::store::Version;
use crate::{Error, Result};

/// A value's version from its ETag (or its length alone where the server gives none).
pub(super) fn version_of(meta: &object_store::ObjectMeta) -> Version {
    version_from(&meta.e_tag, &meta.version, meta.size)
}

pub(super) fn version_from(e_tag: &Option<String>, version: &Option<String>, size: u64) -> Version {
    Version([etag_digest(e_tag, version), size, 0, 0, 0])
}

/// What of a `Version` names the write: its ETag and version (a GCS generation).
pub(super) fn etag_digest(e_tag: &Option<String>, version: &Option<String>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    // Servers differ in quoting an ETag in a listing and in a GET's header (rclone's).
    e_tag.as_deref().map(|e| e.trim_matches('"')).hash(&mut h);
    version.hash(&mut h);
    h.finish()
}

impl ObjectStore {
    pub(super) fn remember_etag(&self, key: &str, etag: Option<Option<UpdateVersion>>) {
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

    /// PUT `value` at `key` in `mode`; a refused condition is `Error::Refused`.
    pub(super) fn put(&self, key: &str, value: &[u8], mode: PutMode) -> Result<Version> {
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
    pub(super) fn update_version(&self, key: &str, version: Version) -> Result<UpdateVersion> {
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
