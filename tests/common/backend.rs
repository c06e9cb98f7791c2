//! Which store the mount tests run against. By default the local directory a test built; with
//! `ZARRFS_TEST_S3_BUCKET` set (and the conventional `AWS_*` environment pointing at a server,
//! as `scripts/test` sets it for moto), the same tests run against an S3 bucket: the directory
//! is mirrored to a prefix of the bucket before the mount, mounted as `s3://bucket/prefix`, and
//! mirrored back when the mount stops (and whenever a test takes a `snapshot` of it), so every
//! test checks the store in the same way whichever backend served it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use zarrfs::store::{Location, RemoteLocation, RemoteOptions, Store};

/// A mirrored directory's bucket prefix and store (held so that its client is reused).
type Mirror = (String, Arc<dyn Store>);

struct Bucket {
    name: String,
    mirrors: Mutex<HashMap<PathBuf, Mirror>>,
}

fn bucket() -> Option<&'static Bucket> {
    static BUCKET: OnceLock<Option<Bucket>> = OnceLock::new();
    BUCKET
        .get_or_init(|| {
            let name = std::env::var("ZARRFS_TEST_S3_BUCKET").ok().filter(|b| !b.is_empty())?;
            Some(Bucket { name, mirrors: Mutex::default() })
        })
        .as_ref()
}

/// Whether the tests run against a bucket.
pub fn is_s3() -> bool {
    bucket().is_some()
}

/// What `zarrfs mount` is given for the store in `dir`: the directory itself, or the bucket
/// prefix its contents were just mirrored to.
pub fn mount_source(dir: &Path) -> std::ffi::OsString {
    let Some(b) = bucket() else { return dir.as_os_str().to_owned() };
    if !dir.is_dir() {
        return dir.as_os_str().to_owned();
    }
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let (prefix, store) = {
        let mut mirrors = b.mirrors.lock().unwrap_or_else(|p| p.into_inner());
        mirrors
            .entry(canon.clone())
            .or_insert_with(|| {
                let prefix = format!("t{}-{}", std::process::id(), unique(&canon));
                let location = Location::Remote(RemoteLocation::S3 { bucket: b.name.clone(), prefix: prefix.clone() });
                (prefix, location.open(&RemoteOptions::default()).expect("open the test bucket"))
            })
            .clone()
    };
    push(&canon, store.as_ref());
    format!("s3://{}/{prefix}", b.name).into()
}

/// Mirror the bucket prefix of `dir` (if it has one) back into `dir`.
pub fn pull(dir: &Path) {
    let Some(b) = bucket() else { return };
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mirrors: Vec<_> = b.mirrors.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(d, (_, s))| (d.clone(), s.clone())).collect();
    for (root, store) in mirrors {
        if canon.starts_with(&root) || root.starts_with(&canon) {
            let remote = keys(store.as_ref(), "");
            let local = local_files(&root);
            for key in local.keys().filter(|k| !remote.contains(k)) {
                let _ = std::fs::remove_file(root.join(key));
            }
            for key in remote {
                let value = store.get(&key, u64::MAX).expect("pull").unwrap_or_default();
                if local.get(&key) != Some(&value) {
                    let path = root.join(&key);
                    std::fs::create_dir_all(path.parent().expect("parent")).expect("pull: mkdir");
                    std::fs::write(&path, value).expect("pull: write");
                }
            }
        }
    }
}

fn unique(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    path.hash(&mut h);
    h.finish()
}

fn push(root: &Path, store: &dyn Store) {
    let local = local_files(root);
    let remote: std::collections::HashSet<String> = keys(store, "").into_iter().collect();
    for key in remote.iter().filter(|k| !local.contains_key(*k)) {
        store.delete(key).expect("push: delete");
    }
    for (key, value) in local {
        if !remote.contains(&key) || store.get(&key, u64::MAX).expect("push: get").as_deref() != Some(value.as_slice()) {
            store.set(&key, &value).expect("push: put");
        }
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
