//! Which store the mount tests run against. By default the local directory a test built; with
//! `ZARRFS_TEST_BUCKET_URL` set (`s3://bucket`, `az://container`, `gs://bucket`, with its cloud's
//! environment pointing at a server on loopback, as `scripts/with-store` sets them), the same
//! tests run against that bucket: the directory is mirrored to a prefix of the bucket before the
//! mount, mounted as `URL/prefix`, and mirrored back when the mount stops (and whenever a test
//! takes a `snapshot` of it or calls `pull`), so every test checks the store in the same way
//! whichever backend served it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use zarrfs::store::{Location, RemoteOptions, Store};

/// A directory mirrored to a bucket prefix.
struct Mirror {
    prefix: String,
    store: Arc<dyn Store>,
    /// What the prefix holds as of the last push or pull: each key's content hash.
    synced: HashMap<String, u64>,
}

struct Bucket {
    /// `s3://bucket`, `az://container`, `gs://bucket`.
    url: String,
    mirrors: Mutex<HashMap<PathBuf, Arc<Mutex<Mirror>>>>,
}

fn bucket() -> Option<&'static Bucket> {
    static BUCKET: OnceLock<Option<Bucket>> = OnceLock::new();
    BUCKET
        .get_or_init(|| {
            let url = std::env::var("ZARRFS_TEST_BUCKET_URL")
                .ok()
                .or_else(|| std::env::var("ZARRFS_TEST_S3_BUCKET").ok().map(|b| format!("s3://{b}")))
                .filter(|u| !u.is_empty())?;
            Some(Bucket { url: url.trim_end_matches('/').to_string(), mirrors: Mutex::default() })
        })
        .as_ref()
}

/// Whether the tests run against a bucket (of any cloud).
pub fn is_s3() -> bool {
    bucket().is_some()
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// What `zarrfs mount` is given for the store in `dir`: the directory itself, or the bucket
/// prefix its contents were just mirrored to. A file (an archive) is mirrored with the
/// directory that holds it, and named as the object it became.
pub fn mount_source(dir: &Path) -> std::ffi::OsString {
    if dir.is_file()
        && let (Some(parent), Some(name)) = (dir.parent(), dir.file_name())
    {
        let mut source = mount_source(parent);
        if source != parent.as_os_str() {
            source.push("/");
            source.push(name);
            return source;
        }
        return dir.as_os_str().to_owned();
    }
    match push(dir) {
        Some(prefix) => format!("{}/{prefix}", bucket().map_or("", |b| b.url.as_str())).into(),
        None => dir.as_os_str().to_owned(),
    }
}

/// Mirror what changed in `dir` since the last sync to its bucket prefix (a store changed
/// behind a live mount's back, as another writer would); returns the prefix. `None` on the
/// local backend.
pub fn push(dir: &Path) -> Option<String> {
    let b = bucket()?;
    if !dir.is_dir() {
        return None;
    }
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mirror = b
        .mirrors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(canon.clone())
        .or_insert_with(|| {
            // A prefix of its own per process and directory: it starts empty.
            let prefix = format!("t{}-{}", std::process::id(), hash(canon.as_os_str().as_encoded_bytes()));
            let location = Location::parse(format!("{}/{prefix}", b.url).as_ref()).expect("the test bucket's URL");
            let store = location.open(&RemoteOptions::default()).expect("open the test bucket");
            Arc::new(Mutex::new(Mirror { prefix, store, synced: HashMap::new() }))
        })
        .clone();
    let mut mirror = mirror.lock().unwrap_or_else(|p| p.into_inner());
    let local = local_files(&canon);
    for key in mirror.synced.keys().filter(|k| !local.contains_key(*k)) {
        mirror.store.delete(key).expect("push: delete");
    }
    for (key, value) in &local {
        if mirror.synced.get(key) != Some(&hash(value)) {
            mirror.store.set(key, value).expect("push: put");
        }
    }
    mirror.synced = local.iter().map(|(k, v)| (k.clone(), hash(v))).collect();
    Some(mirror.prefix.clone())
}

/// Mirror the bucket prefix of `dir` (or of the store it lies in) back into it.
pub fn pull(dir: &Path) {
    let Some(b) = bucket() else { return };
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mirrors: Vec<_> = b.mirrors.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(d, m)| (d.clone(), m.clone())).collect();
    for (root, mirror) in mirrors {
        if !(canon.starts_with(&root) || root.starts_with(&canon)) {
            continue;
        }
        let mut mirror = mirror.lock().unwrap_or_else(|p| p.into_inner());
        let local = local_files(&root);
        let mut synced = HashMap::new();
        for key in keys(mirror.store.as_ref(), "") {
            let value = mirror.store.get(&key, u64::MAX).expect("pull").unwrap_or_default();
            if local.get(&key) != Some(&value) {
                let path = root.join(&key);
                std::fs::create_dir_all(path.parent().expect("parent")).expect("pull: mkdir");
                std::fs::write(&path, &value).expect("pull: write");
            }
            synced.insert(key, hash(&value));
        }
        for key in local.keys().filter(|k| !synced.contains_key(*k)) {
            let _ = std::fs::remove_file(root.join(key));
        }
        mirror.synced = synced;
    }
}

/// Every key under `prefix` in the store.
fn keys(store: &dyn Store, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in store.list_dir(prefix).expect("list") {
        let key = zarrfs::store::join(prefix, &e.name);
        if e.is_dir { out.extend(keys(store, &key)) } else { out.push(key) }
    }
    out
}

/// Every regular file under `root`, by key.
fn local_files(root: &Path) -> HashMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut HashMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                walk(root, &p, out);
            } else if ft.is_file()
                && let (Ok(rel), Ok(bytes)) = (p.strip_prefix(root), std::fs::read(&p))
            {
                out.insert(rel.to_string_lossy().into_owned(), bytes);
            }
        }
    }
    let mut out = HashMap::new();
    walk(root, root, &mut out);
    out
}

/// True (and says why) when the tests run against a bucket and this one should not: it checks
/// something only a local directory has, or moves tens of thousands of objects (minutes
/// against moto for what the local run already proves).
pub fn local_only(why: &str) -> bool {
    if is_s3() {
        eprintln!("run against the local directory only: {why}");
    }
    is_s3()
}

/// True (and says why) when the tests run against moto speaking GCS's XML API: it keeps no
/// generations, which rewriting a document needs (`docs/stores.md`), so another writer's
/// rewrite cannot be staged there.
pub fn no_document_rewrites() -> bool {
    let gcs = bucket().is_some_and(|b| b.url.starts_with("gs://"));
    if gcs {
        eprintln!("not against GCS's emulation: it keeps no generations for a document rewrite");
    }
    gcs
}

/// Whether a live daemon changed its store or may at its shutdown: its `.zarrfs/stats` counts
/// the PUTs and DELETEs it made and the writes and size changes it took (`None` when it cannot
/// be read).
pub fn store_changed(mountpoint: &Path) -> Option<bool> {
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(mountpoint.join(".zarrfs/stats")).ok()?).ok()?;
    let n = |section: &str, k: &str| stats[section][k].as_u64();
    Some(n("store_requests", "put")? + n("store_requests", "delete")? + n("requests", "write")? + n("requests", "setattr")? > 0)
}
