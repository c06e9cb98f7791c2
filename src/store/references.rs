//! A kerchunk reference set as a read-only store: each key is a value written inline in the
//! set (text, or `base64:` bytes) or a range of another file (`[url, offset, size]`, or the
//! whole file, `[url]`) — how kerchunk and VirtualiZarr describe the chunks of netCDF4, HDF5
//! and netCDF3 files as a Zarr store. JSON version 0 (flat) and version 1 (`refs` with
//! `templates` and `gen`) are read, and parquet sets (`records`).
//!
//! The set is a local file or an object (`s3://`, `gs://`, `az://`, `https://`); targets are
//! local files (absolute paths, `file://`), objects, or paths relative to the set's own
//! directory. A reference set is an instruction to read arbitrary files, so targets are read
//! only beneath the allowed prefixes: the set's own directory (a local set) or its own bucket,
//! container or host (a set on object storage), and those `--targets` adds. A local target is
//! resolved (links, `..`) before it is checked; one outside is refused on its read with EACCES,
//! logged with the prefix that would allow it. Open target files are kept (at most
//! `OPEN_TARGETS`), so many small reads into one file share a descriptor; object targets are
//! read through one client per bucket or host.

use std::collections::HashMap;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;

use super::{ByteRange, Entry, Head, Location, Permissions, RemoteLocation, RemoteOptions, Store, Usage, Value, Version, resolve_range};
use crate::error::lock;
use crate::{Error, Result};

mod generated;
#[cfg(feature = "parquet")]
mod records;

/// The largest reference file read (a JSON set of some millions of references).
const MAX_REFERENCE_FILE: u64 = 1 << 30;
/// Target files kept open.
const OPEN_TARGETS: usize = 64;

/// Where a key's bytes are.
#[derive(Clone, Debug)]
enum Ref {
    Inline(Vec<u8>),
    /// `len: None`: the whole target file. The target as the set names it (after templates),
    /// one allocation shared by the references into one file.
    Range {
        target: Arc<str>,
        offset: u64,
        len: Option<u64>,
    },
}

/// The references of a set: all of a JSON set's, or a parquet set's read a record at a time.
enum Set {
    Json(HashMap<String, Ref>),
    #[cfg(feature = "parquet")]
    Parquet(records::Records),
}

/// Where a reference set is: relative targets are read from there.
#[derive(Clone, Debug)]
pub enum SetDirectory {
    Local(PathBuf),
    Remote(RemoteLocation),
}

/// A prefix targets may lie beneath.
#[derive(Debug)]
enum Allowed {
    /// A local directory, resolved.
    Dir(PathBuf),
    /// A URL without its trailing slash (`s3://bucket`, `https://host/dir`).
    Url(String),
}

/// Where a target's bytes are.
enum Place {
    File(PathBuf),
    Object { root: RemoteLocation, key: String },
}

pub struct ReferenceStore {
    container: Arc<dyn Store>,
    file: String,
    version: Version,
    refs: Set,
    dirs: super::key_tree::KeyTree,
    /// Where relative targets are, and the prefixes targets must lie beneath.
    base: SetDirectory,
    allowed: Vec<Allowed>,
    open: Mutex<lru::LruCache<Arc<str>, Arc<std::fs::File>>>,
    /// How object targets are reached, and a client for each bucket or host read.
    options: RemoteOptions,
    clients: Mutex<HashMap<String, Arc<dyn Store>>>,
}

/// Why a reference set cannot be read.
fn bad(file: &str, why: impl std::fmt::Display) -> Error {
    Error::metadata(format!("reference set {file}: {why}"))
}

/// The group and other read bits of the local file `path` (resolved): each kept where every
/// directory above the file lets the same users search it, as a store in a 0700 home is served
/// to no one else; a file or directory of another group than the set's (`gid`) counts its
/// group's bits as others'.
fn target_readers(path: &Path, gid: u32) -> Result<u32> {
    use std::os::unix::fs::MetadataExt;
    // The (group, other) classes' `bit` (4: read, 1: search) of an entry.
    let classes = |meta: &std::fs::Metadata, bit: u32| {
        let other = meta.mode() & bit != 0;
        (if meta.gid() == gid { (meta.mode() >> 3) & bit != 0 } else { other }, other)
    };
    let (mut group, mut other) = classes(&std::fs::symlink_metadata(path)?, 4);
    for dir in path.ancestors().skip(1) {
        let (g, o) = classes(&std::fs::metadata(dir)?, 1);
        (group, other) = (group && g, other && o);
    }
    Ok(if group { 0o040 } else { 0 } | if other { 0o004 } else { 0 })
}

impl ReferenceStore {
    /// The set `file` (a key of `container`, which is `base`), reading targets beneath `base`
    /// (or in its bucket) and the prefixes in `options.targets`.
    pub fn open(container: Arc<dyn Store>, file: &str, base: SetDirectory, options: &RemoteOptions) -> Result<ReferenceStore> {
        let value = container.get_value(file, MAX_REFERENCE_FILE)?.ok_or(Error::NotFound)?;
        // fsspec compresses a set by its name's suffix (`refs.json.zst`: `compression="infer"`);
        // told apart here by the compressor's first bytes, whatever the name says.
        let json = match options.uncompress {
            Some(uncompress) => uncompress(value.bytes, MAX_REFERENCE_FILE as usize).map_err(|e| bad(file, e))?.1,
            None => value.bytes,
        };
        let doc: serde_json::Value = serde_json::from_slice(&json).map_err(|e| bad(file, format!("not JSON: {e}")))?;
        let mut allowed = vec![match &base {
            SetDirectory::Local(dir) => Allowed::Dir(dir.canonicalize().map_err(|e| bad(file, format!("{}: {e}", dir.display())))?),
            SetDirectory::Remote(dir) => Allowed::Url(dir.root_and_path().0.to_string()),
        }];
        for t in &options.targets {
            match RemoteLocation::parse(t) {
                Some(remote) => allowed.push(Allowed::Url(remote.map_err(Error::Invalid)?.to_string())),
                // A directory that does not exist allows nothing; it is not an error to name one.
                None => allowed.extend(Path::new(t.strip_prefix("file://").unwrap_or(t)).canonicalize().ok().map(Allowed::Dir)),
            }
        }
        let mut store = ReferenceStore {
            container,
            file: file.to_string(),
            version: value.version,
            refs: Set::Json(HashMap::new()),
            dirs: Default::default(),
            base,
            allowed,
            open: Mutex::new(lru::LruCache::new(std::num::NonZeroUsize::new(OPEN_TARGETS).unwrap_or(std::num::NonZeroUsize::MIN))),
            options: options.clone(),
            clients: Mutex::new(HashMap::new()),
        };
        store.read_set(&doc)?;
        Ok(store)
    }

    fn read_set(&mut self, doc: &serde_json::Value) -> Result<()> {
        let obj = doc.as_object().ok_or_else(|| bad(&self.file, "not a JSON object"))?;
        if obj.contains_key("record_size") {
            return self.read_parquet_set(doc);
        }
        let (refs, templates) = match obj.get("version") {
            None => (obj, serde_json::Map::new()),
            Some(v) if v.as_u64() == Some(1) => {
                let refs = obj.get("refs").and_then(|r| r.as_object()).ok_or_else(|| bad(&self.file, "version 1 without `refs`"))?;
                (refs, obj.get("templates").and_then(|t| t.as_object()).cloned().unwrap_or_default())
            }
            Some(v) => return Err(bad(&self.file, format!("version {v} (zarrfs reads 0 and 1)"))),
        };
        let mut interned: HashMap<String, Arc<str>> = HashMap::new();
        let mut all = HashMap::new();
        let generated = match obj.get("gen").filter(|_| obj.contains_key("version")) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(entries)) => generated::expand(entries, &templates).map_err(|e| bad(&self.file, e))?,
            Some(other) => return Err(bad(&self.file, format!("gen {other} is not a list"))),
        };
        // Generated references first: a key the set also names is the set's own (kerchunk
        // renders `gen` into the references it is given).
        for g in generated {
            let value = match g.range {
                Some((offset, len)) => serde_json::json!([g.url, offset, len]),
                None => serde_json::json!([g.url]),
            };
            self.add_reference(&mut all, &g.key, &value, &templates, &mut interned)?;
        }
        for (key, value) in refs {
            self.add_reference(&mut all, key, value, &templates, &mut interned)?;
        }
        self.refs = Set::Json(all);
        Ok(())
    }

    /// A parquet set (`.zmetadata` with `record_size`): its documents now, its records as read.
    #[cfg(feature = "parquet")]
    fn read_parquet_set(&mut self, doc: &serde_json::Value) -> Result<()> {
        let records = records::Records::open(self.container.clone(), doc)?;
        for key in records.document_keys() {
            self.dirs.add(key, false);
        }
        self.refs = Set::Parquet(records);
        Ok(())
    }

    #[cfg(not(feature = "parquet"))]
    fn read_parquet_set(&mut self, _doc: &serde_json::Value) -> Result<()> {
        Err(Error::Unsupported(format!(
            "reference set {}: parquet sets need the cargo feature parquet: {}",
            self.file,
            crate::BUILD_IT_WHOLE
        )))
    }

    fn add_reference(
        &mut self,
        all: &mut HashMap<String, Ref>,
        key: &str,
        value: &serde_json::Value,
        templates: &serde_json::Map<String, serde_json::Value>,
        interned: &mut HashMap<String, Arc<str>>,
    ) -> Result<()> {
        let key = key.trim_matches('/');
        if key.is_empty() || key.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
            return Err(bad(&self.file, format!("key {key:?} is not a store key")));
        }
        let r = self.reference(key, value, templates, interned)?;
        all.insert(key.to_string(), r);
        self.dirs.add(key, false);
        Ok(())
    }

    fn reference(
        &mut self,
        key: &str,
        value: &serde_json::Value,
        templates: &serde_json::Map<String, serde_json::Value>,
        interned: &mut HashMap<String, Arc<str>>,
    ) -> Result<Ref> {
        let err = |why: String| bad(&self.file, format!("key {key}: {why}"));
        match value {
            serde_json::Value::String(s) => match s.strip_prefix("base64:") {
                Some(b) => {
                    Ok(Ref::Inline(base64::engine::general_purpose::STANDARD.decode(b).map_err(|e| err(format!("bad base64: {e}")))?))
                }
                None => Ok(Ref::Inline(s.clone().into_bytes())),
            },
            // A document written as JSON rather than as a string of it.
            serde_json::Value::Object(_) => Ok(Ref::Inline(value.to_string().into_bytes())),
            serde_json::Value::Array(parts) => {
                let url = parts.first().and_then(|u| u.as_str()).ok_or_else(|| err(format!("{value} does not start with a URL")))?;
                let url = expand(url, templates).map_err(err)?;
                let (offset, len) = match parts.len() {
                    1 => (0, None),
                    3 => {
                        let n = |i: usize| parts[i].as_u64().ok_or_else(|| err(format!("{value}: offset and size must be whole numbers")));
                        (n(1)?, Some(n(2)?))
                    }
                    _ => return Err(err(format!("{value}: a reference is [url] or [url, offset, size]"))),
                };
                let target = interned.entry(url.clone()).or_insert_with(|| Arc::from(url.as_str())).clone();
                Ok(Ref::Range { target, offset, len })
            }
            other => Err(err(format!("{other} is not a reference"))),
        }
    }

    /// Where the target `url` is, once it is found to lie beneath an allowed prefix.
    fn place(&self, key: &str, url: &str) -> Result<Place> {
        let place = if let Some(path) = url.strip_prefix("file://") {
            Place::File(PathBuf::from(path))
        } else if let Some(remote) = RemoteLocation::parse(url) {
            let (root, key) = remote.map_err(|e| Error::corrupt(key, e))?.root_and_path();
            Place::Object { root, key }
        } else if let Some((scheme, _)) = url.split_once("://") {
            return Err(Error::Unsupported(format!("{key}: target {url}: zarrfs does not read {scheme}:// targets")));
        } else {
            match &self.base {
                SetDirectory::Local(dir) => Place::File(dir.join(url)),
                SetDirectory::Remote(_) if url.starts_with('/') => Place::File(PathBuf::from(url)),
                SetDirectory::Remote(dir) => {
                    // `./name` (as tifffile writes it) is `name`; `..` and empty parts are refused.
                    let parts: Vec<&str> = url.split('/').filter(|p| *p != ".").collect();
                    if parts.is_empty() || parts.iter().any(|p| p.is_empty() || *p == "..") {
                        return Err(Error::corrupt(key, format!("target {url}: not a path beneath the set's directory")));
                    }
                    let (root, key) = dir.beneath(&parts.join("/")).root_and_path();
                    Place::Object { root, key }
                }
            }
        };
        let (allowed, what) = match &place {
            Place::File(path) => {
                let real = path.canonicalize().map_err(|e| Error::corrupt(key, format!("target {}: {e}", path.display())))?;
                let allowed = self.allowed.iter().any(|a| matches!(a, Allowed::Dir(p) if real.starts_with(p)));
                (allowed, real.display().to_string())
            }
            Place::Object { root, key } => {
                let url = format!("{root}/{key}");
                let allowed = self
                    .allowed
                    .iter()
                    .any(|a| matches!(a, Allowed::Url(p) if url.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with('/'))));
                (allowed, url)
            }
        };
        if !allowed {
            tracing::warn!(
                "{key}: target {what} is outside the allowed prefixes ({}; --targets adds others): not read",
                self.allowed_text()
            );
            return Err(Error::Io(std::io::Error::from_raw_os_error(libc::EACCES)));
        }
        Ok(match place {
            Place::File(path) => Place::File(path.canonicalize()?),
            object => object,
        })
    }

    fn allowed_text(&self) -> String {
        let names: Vec<String> = self
            .allowed
            .iter()
            .map(|a| match a {
                Allowed::Dir(p) => p.display().to_string(),
                Allowed::Url(u) => u.clone(),
            })
            .collect();
        names.join(", ")
    }

    /// The target `url`, the local file at `path`, opened.
    fn file(&self, key: &str, url: &Arc<str>, path: &Path) -> Result<Arc<std::fs::File>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::corrupt(key, format!("target {}: {e}", path.display())))?;
        if !file.metadata()?.is_file() {
            return Err(Error::refused(key, format!("target {} is not a regular file", path.display())));
        }
        let file = Arc::new(file);
        lock(&self.open).put(url.clone(), file.clone());
        Ok(file)
    }

    /// The client of the bucket, container or host `root`.
    fn client(&self, root: &RemoteLocation) -> Result<Arc<dyn Store>> {
        let name = root.to_string();
        let mut clients = lock(&self.clients);
        if let Some(c) = clients.get(&name) {
            return Ok(c.clone());
        }
        let client = Location::Remote(root.clone()).open(&self.options).map_err(Error::Invalid)?;
        clients.insert(name, client.clone());
        Ok(client)
    }

    /// The target `url`, open: a local file, or an object store and key.
    fn open_target(&self, key: &str, url: &Arc<str>) -> Result<Opened> {
        // A file already open was checked when it was opened.
        if let Some(f) = lock(&self.open).get(url) {
            return Ok(Opened::File(f.clone()));
        }
        Ok(match self.place(key, url)? {
            Place::File(path) => Opened::File(self.file(key, url, &path)?),
            Place::Object { root, key: object } => Opened::Object(self.client(&root)?, object),
        })
    }

    /// The length of `r`'s bytes.
    fn len_of(&self, key: &str, r: &Ref) -> Result<u64> {
        match r {
            Ref::Inline(b) => Ok(b.len() as u64),
            Ref::Range { len: Some(n), .. } => Ok(*n),
            Ref::Range { target, len: None, .. } => match self.open_target(key, target)? {
                Opened::File(f) => Ok(f.metadata()?.len()),
                Opened::Object(store, object) => Ok(store.head(&object)?.ok_or_else(|| missing(key, &object))?.len),
            },
        }
    }

    /// Bytes `start..end` of `r`'s value.
    fn read(&self, key: &str, r: &Ref, start: u64, end: u64) -> Result<Vec<u8>> {
        match r {
            Ref::Inline(b) => Ok(b[start as usize..end as usize].to_vec()),
            Ref::Range { target, offset, .. } => {
                let at = offset.checked_add(start).ok_or_else(|| Error::corrupt(key, "offset past 2^64"))?;
                let past_end =
                    || Error::corrupt(key, format!("bytes {at}..{} are past the end of the target", at.saturating_add(end - start)));
                match self.open_target(key, target)? {
                    Opened::File(file) => {
                        // Checked against the file's length first: an offset past what pread
                        // takes (2^63) is the set's fault, not the request's.
                        if at.checked_add(end - start).is_none_or(|last| last > file.metadata().map_or(0, |m| m.len())) {
                            return Err(past_end());
                        }
                        let n = usize::try_from(end - start).map_err(|_| crate::limits::out_of_memory())?;
                        let mut buf = Vec::new();
                        buf.try_reserve_exact(n).map_err(|_| crate::limits::out_of_memory())?;
                        buf.resize(n, 0);
                        file.read_exact_at(&mut buf, at).map_err(|e| match e.kind() {
                            // Shortened since the length was read.
                            std::io::ErrorKind::UnexpectedEof => past_end(),
                            _ => Error::corrupt(key, format!("target {target}: {e}")),
                        })?;
                        Ok(buf)
                    }
                    Opened::Object(store, object) => {
                        let range = ByteRange::Range { start: at, len: end - start };
                        match store.get_range(&object, range) {
                            Ok(Some(bytes)) => Ok(bytes),
                            Ok(None) => Err(missing(key, &object)),
                            Err(Error::Corrupt { .. }) => Err(past_end()),
                            Err(e) => Err(e),
                        }
                    }
                }
            }
        }
    }

    fn version_of(&self, key: &str) -> Version {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(key, &mut h);
        Version([self.version.0[0], self.version.0[1], self.version.0[2], self.version.0[3], std::hash::Hasher::finish(&h)])
    }
}

/// A target opened for reading.
enum Opened {
    File(Arc<std::fs::File>),
    Object(Arc<dyn Store>, String),
}

fn missing(key: &str, object: &str) -> Error {
    Error::corrupt(key, format!("target object {object} is missing"))
}

/// `url` with each `{{name}}` replaced by its template.
fn expand(url: &str, templates: &serde_json::Map<String, serde_json::Value>) -> std::result::Result<String, String> {
    if !url.contains("{{") {
        return Ok(url.to_string());
    }
    let mut out = String::new();
    let mut rest = url;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let j = after.find("}}").ok_or_else(|| format!("{url}: an unclosed {{{{"))?;
        let name = after[..j].trim();
        let value = templates.get(name).and_then(|v| v.as_str()).ok_or_else(|| format!("{url}: no template {name:?}"))?;
        // Templates are not expanded again: a template naming itself cannot loop.
        out.push_str(value);
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

impl ReferenceStore {
    /// Where `key`'s bytes are, if the set has it.
    fn lookup(&self, key: &str) -> Result<Option<Ref>> {
        match &self.refs {
            Set::Json(refs) => Ok(refs.get(key).cloned()),
            #[cfg(feature = "parquet")]
            Set::Parquet(records) => records.lookup(key),
        }
    }
}

impl Store for ReferenceStore {
    super::read_only_writes!();

    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>> {
        let Some(r) = self.lookup(key)? else { return Ok(None) };
        let r = &r;
        let len = self.len_of(key, r)?;
        if len > max {
            return Err(Error::refused(key, format!("{len} bytes, more than the {max} it can hold (not read)")));
        }
        Ok(Some(Value { bytes: self.read(key, r, 0, len)?, version: self.version_of(key) }))
    }

    fn head(&self, key: &str) -> Result<Option<Head>> {
        let Some(r) = self.lookup(key)? else { return Ok(None) };
        Ok(Some(Head { len: self.len_of(key, &r)?, version: self.version_of(key) }))
    }

    fn get_range_versioned(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        let Some(r) = self.lookup(key)? else { return Ok(None) };
        let (start, end) = resolve_range(key, range, self.len_of(key, &r)?)?;
        Ok(Some((self.read(key, &r, start, end)?, self.version_of(key))))
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        Ok(self.dirs.list(prefix))
    }

    /// A parquet set's chunk keys are in its record files, not in its listings: no listing
    /// tells which chunks are absent.
    fn list_names_upto(&self, prefix: &str, max: usize) -> Result<Option<Vec<String>>> {
        match &self.refs {
            Set::Json(_) => {
                let entries = self.dirs.list(prefix);
                Ok((entries.len() <= max).then(|| entries.into_iter().map(|e| e.name).collect()))
            }
            #[cfg(feature = "parquet")]
            Set::Parquet(_) => Ok(None),
        }
    }

    fn usage(&self, prefix: &str, most: u64) -> Result<Option<Usage>> {
        let lead = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
        let refs = match &self.refs {
            Set::Json(refs) => refs,
            // A parquet set's sizes are in its record files, read only as chunks are.
            #[cfg(feature = "parquet")]
            Set::Parquet(_) => return Ok(None),
        };
        let mut usage = Usage { complete: true, ..Usage::default() };
        for (key, r) in refs {
            if key.starts_with(&lead) {
                if usage.values >= most {
                    usage.complete = false;
                    break;
                }
                usage.values += 1;
                usage.bytes += match r {
                    Ref::Inline(b) => b.len() as u64,
                    Ref::Range { len, .. } => len.unwrap_or(0),
                };
            }
        }
        Ok(Some(usage))
    }

    fn permissions(&self, key: &str) -> Result<Option<Permissions>> {
        let found = if key.is_empty() || self.dirs.is_dir(key) { None } else { Some(self.lookup(key)?) };
        let Some(set) = self.container.permissions(&self.file)?.filter(|_| !matches!(found, Some(None))) else { return Ok(None) };
        // Who may read the reference set may read what it shows, and a local target's bytes
        // only whom the target itself admits (a private file is no one else's to read).
        let mut mode = if set.link { 0o600 } else { set.mode & 0o444 };
        if let Some(Some(Ref::Range { target, .. })) = &found
            && let Place::File(path) = self.place(key, target)?
        {
            mode &= 0o400 | target_readers(&path, set.gid)?;
        }
        Ok(Some(Permissions { mode: mode | ((mode & 0o444) >> 2), gid: set.gid, link: false }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LocalStore;

    fn set(dir: &Path, json: &str) -> Result<ReferenceStore> {
        std::fs::write(dir.join("refs.json"), json).unwrap();
        let container: Arc<dyn Store> = Arc::new(LocalStore::open(dir).unwrap());
        ReferenceStore::open(container, "refs.json", SetDirectory::Local(dir.to_path_buf()), &RemoteOptions::default())
    }

    #[test]
    fn inline_ranges_templates_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.bin"), b"0123456789").unwrap();
        let s = set(
            dir.path(),
            r#"{"version": 1, "templates": {"u": "data.bin"}, "refs": {
                ".zgroup": "{\"zarr_format\": 2}", "a/0": ["{{u}}", 2, 3], "a/1": "base64:AAE=", "a/2": ["data.bin"],
                "a/3": ["data.bin", 8, 5], "a/4": ["/etc/hostname"], "a/5": ["s3://bkt/k", 0, 1], "a/6": ["ftp://h/k"],
                "a/7": ["data.bin", 9223372036854775807, 2]}}"#,
        )
        .unwrap();
        assert_eq!(s.get("a/0", 100).unwrap().unwrap(), b"234");
        assert_eq!(s.get("a/1", 100).unwrap().unwrap(), [0, 1]);
        assert_eq!(s.get("a/2", 100).unwrap().unwrap(), b"0123456789");
        assert_eq!(s.get_range("a/2", ByteRange::Range { start: 4, len: 2 }).unwrap().unwrap(), b"45");
        assert!(s.get("a/3", 100).unwrap_err().to_string().contains("past the end"));
        // An offset pread cannot take is the set's fault: EIO, not EINVAL.
        assert!(s.get("a/7", 100).unwrap_err().to_string().contains("past the end"));
        assert_eq!(s.get("a/4", 100).unwrap_err().errno(), libc::EACCES);
        assert_eq!(s.get("a/5", 100).unwrap_err().errno(), libc::EACCES);
        assert_eq!(s.get("a/6", 100).unwrap_err().errno(), libc::EOPNOTSUPP);
        assert!(s.get("a/2", 5).is_err());
        let names: Vec<String> = s.list_dir("").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, [".zgroup", "a"]);
        assert_eq!(s.list_dir("a").unwrap().len(), 8);
        assert_eq!(s.set("a/0", b"x").unwrap_err().errno(), libc::EROFS);
        // A link inside the directory to a file outside it is outside.
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link")).unwrap();
        let s = set(dir.path(), r#"{"x": ["link"], "z": ["missing", 0, 1]}"#).unwrap();
        assert_eq!(s.get("x", 100).unwrap_err().errno(), libc::EACCES);
        assert_eq!(s.get("z", 100).unwrap_err().errno(), libc::EIO);
        // `..` out of the set's directory, to a file that is there.
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        let s = set(&inner, r#"{"y": ["../data.bin"], "w": ["../inner/../data.bin"]}"#).unwrap();
        assert_eq!(s.get("y", 100).unwrap_err().errno(), libc::EACCES);
        assert_eq!(s.get("w", 100).unwrap_err().errno(), libc::EACCES);
        // Bad sets fail whole, with a reason.
        for (json, why) in [
            (r#"{"a": "base64:!!"}"#, "base64"),
            (r#"{"a": ["u", -1, 2]}"#, "whole numbers"),
            (r#"{"a": ["u", 1]}"#, "[url, offset, size]"),
            (r#"{"version": 1, "refs": {"a": ["{{t}}"]}}"#, "no template"),
            (r#"{"version": 1, "templates": {"t": "{{t}}"}, "refs": {"a": ["{{t"]}}"#, "unclosed"),
            (r#"{"version": 2}"#, "version 2"),
            (r#"{"../a": "x"}"#, "not a store key"),
            (r#"{"version": 1, "refs": {}, "gen": [{"key": "a"}]}"#, "without a url"),
            ("[1]", "not a JSON object"),
        ] {
            let e = set(dir.path(), json).err().unwrap().to_string();
            assert!(e.contains(why), "{json}: {e}");
        }
        // A template naming itself is replaced once, never again.
        let s = set(dir.path(), r#"{"version": 1, "templates": {"t": "{{t}}"}, "refs": {"a": ["{{t}}"]}}"#).unwrap();
        assert!(s.get("a", 100).is_err());
    }
}
