//! One store conformance suite that every backend runs (as object_store's is): values, ranges,
//! heads, listings, deletes, versions, conditional creates and updates, conflicts, conditional
//! deletes (or the store saying it has none), read-after-write from a second instance (a
//! second mount), a counter incremented by conditional writes from two instances at once, and
//! the lock a shape change holds. Backends: memory, a local directory, an Icechunk repository
//! (local), the bucket of `ZARRFS_TEST_BUCKET_URL` (S3, Azurite, GCS under
//! `scripts/with-store`); the zip archive refuses every write. Keys are Zarr-shaped (an array's
//! document and chunk keys), which every store takes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use zarrfs::Error;
use zarrfs::store::{ByteRange, Expect, Location, MemoryStore, RemoteOptions, Store};

const DOC: &str = r#"{"zarr_format": 3, "node_type": "array", "shape": [64], "data_type": "uint8",
  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16]}},
  "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}"#;

struct Backend {
    name: String,
    /// Another instance of the same store (another mount).
    open: Box<dyn Fn() -> Arc<dyn Store>>,
    _keep: Option<tempfile::TempDir>,
}

fn backends() -> Vec<Backend> {
    let mut out = Vec::new();
    if let Ok(url) = std::env::var("ZARRFS_TEST_BUCKET_URL") {
        let url = format!("{}/conformance-{}", url.trim_end_matches('/'), std::process::id());
        let location = Location::parse(url.as_ref()).expect("the bucket's URL");
        out.push(Backend {
            name: url,
            open: Box::new(move || location.open(&RemoteOptions::default()).expect("open the bucket")),
            _keep: None,
        });
        return out;
    }
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    out.push(Backend { name: "memory".into(), open: Box::new(move || memory.clone()), _keep: None });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    out.push(Backend {
        name: "local".into(),
        open: Box::new(move || Arc::new(zarrfs::store::LocalStore::open(&path).unwrap())),
        _keep: Some(dir),
    });
    // A copy of the repository Python icechunk wrote, at its branch `main`.
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let copied = std::process::Command::new("cp").arg("-r").arg(common::fixtures().join("icechunk/repo")).arg(&repo).status().unwrap();
    assert!(copied.success());
    let location = Location::parse(repo.as_os_str()).expect("an Icechunk repository");
    out.push(Backend {
        name: "icechunk (local)".into(),
        open: Box::new(move || location.open(&RemoteOptions::default()).expect("open the repository")),
        _keep: Some(dir),
    });
    out
}

fn conflict<T: std::fmt::Debug>(r: zarrfs::Result<T>, what: &str) {
    assert!(matches!(r, Err(Error::Conflict { .. })), "{what}: {r:?}");
}

fn suite(b: &Backend) {
    let name = &b.name;
    let s = (b.open)();
    s.set("conf/zarr.json", DOC.as_bytes()).unwrap();
    s.sync(&["conf/zarr.json".into()]).unwrap();
    // Values, versions, ranges, heads, listings.
    assert!(s.get("conf/c/0", 64).unwrap().is_none(), "{name}: absent");
    let h = s.head("conf/c/0");
    assert!(matches!(h, Ok(None)), "{name}: head of absent: {h:?}");
    let v1 = s.set("conf/c/0", b"hello world").unwrap();
    let got = s.get_value("conf/c/0", 64).unwrap().unwrap();
    assert_eq!((got.bytes.as_slice(), got.version), (&b"hello world"[..], v1), "{name}: read after write");
    let head = s.head("conf/c/0").unwrap().unwrap();
    assert_eq!((head.len, head.version), (11, v1), "{name}: head");
    assert_eq!(s.get_range("conf/c/0", ByteRange::Range { start: 2, len: 3 }).unwrap().unwrap(), b"llo", "{name}: range");
    assert_eq!(s.get_range("conf/c/0", ByteRange::Suffix(5)).unwrap().unwrap(), b"world", "{name}: suffix");
    assert!(s.get_range("conf/c/0", ByteRange::Range { start: 8, len: 9 }).is_err(), "{name}: a range past the end");
    assert!(s.get_value("conf/c/0", 4).is_err(), "{name}: a value past its bound is refused");
    let listed = s.list_dir("conf/c").unwrap();
    assert!(listed.iter().any(|e| e.name == "0" && !e.is_dir), "{name}: listing {listed:?}");
    // Conditional creates and updates.
    conflict(s.set_if("conf/c/0", b"x", Expect::Absent), &format!("{name}: create over a value"));
    let new = s.set_if("conf/c/1", b"new", Expect::Absent).unwrap();
    conflict(s.set_if("conf/c/1", b"again", Expect::Absent), &format!("{name}: a second create"));
    let v2 = s.set_if("conf/c/0", b"two", Expect::At(v1)).unwrap();
    assert_ne!(v1, v2, "{name}: a write is a new version");
    conflict(s.set_if("conf/c/0", b"three", Expect::At(v1)), &format!("{name}: an update over a stale version"));
    assert_eq!(s.get("conf/c/0", 64).unwrap().unwrap(), b"two", "{name}: a refused update changes nothing");
    s.set_if("conf/c/0", b"any", Expect::Any).unwrap();
    // Conditional deletes, or the store saying it has none.
    conflict(s.delete_if("conf/c/0", Expect::Absent), &format!("{name}: delete of a value expected absent"));
    s.delete_if("conf/c/9", Expect::Absent).unwrap();
    println!("conformance ({name}): conditional deletes: {}", s.deletes_conditionally());
    // moto's S3 and Azurite keep a DELETE's condition; moto serving gs:// ignores GCS's.
    if name.starts_with("s3://") || name.starts_with("az://") {
        assert!(s.deletes_conditionally(), "{name}: the server keeps a DELETE's condition, so the store must use it");
    }
    if s.deletes_conditionally() {
        conflict(s.delete_if("conf/c/1", Expect::At(v1)), &format!("{name}: delete over a stale version"));
        s.delete_if("conf/c/1", Expect::At(new)).unwrap();
        // A key a raw request must encode as the client does (its signature covers the path).
        s.set("an array é+%&=/zarr.json", DOC.as_bytes()).unwrap();
        let odd = "an array é+%&=/c/0";
        let at = s.set_if(odd, b"odd", Expect::Absent).unwrap();
        s.delete_if(odd, Expect::At(at)).unwrap();
        assert!(s.get(odd, 64).unwrap().is_none(), "{name}: an odd key deleted over its version");
    } else {
        assert!(matches!(s.delete_if("conf/c/1", Expect::At(new)), Err(Error::Unsupported(_))), "{name}: says it cannot");
        s.delete("conf/c/1").unwrap();
        println!("conformance ({name}): no conditional DELETE (a chunk made fill is stored as fill)");
    }
    assert!(s.get("conf/c/1", 64).unwrap().is_none(), "{name}: deleted");
    s.delete("conf/c/1").unwrap();
    // Read after write from another instance.
    s.set("conf/c/2", b"seen").unwrap();
    s.sync(&["conf/c/0".into(), "conf/c/2".into()]).unwrap();
    let other = (b.open)();
    assert_eq!(other.get("conf/c/2", 64).unwrap().unwrap(), b"seen", "{name}: another instance reads what was stored");
    if s.arbitrates_commits() {
        // Conditional writes hold within a session; the commit arbitrates between sessions.
        println!("conformance ({name}): passed (conflicts between writers are the commit's)");
        return;
    }
    // Two instances, two threads each, incrementing one counter by conditional writes.
    s.set("conf/c/3", b"0").unwrap();
    let instances = [s.clone(), other.clone()];
    std::thread::scope(|scope| {
        for store in &instances {
            for _ in 0..2 {
                scope.spawn(move || {
                    for _ in 0..25 {
                        loop {
                            let v = store.get_value("conf/c/3", 64).unwrap().unwrap();
                            let n: u64 = std::str::from_utf8(&v.bytes).unwrap().parse().unwrap();
                            match store.set_if("conf/c/3", (n + 1).to_string().as_bytes(), Expect::At(v.version)) {
                                Ok(_) => break,
                                Err(Error::Conflict { .. }) => continue,
                                Err(e) => panic!("{name}: {e}"),
                            }
                        }
                    }
                });
            }
        }
    });
    assert_eq!(s.get("conf/c/3", 64).unwrap().unwrap(), b"100", "{name}: no increment lost");
    // The lock of a shape change: one holder across instances; let go when dropped.
    let held = s.clone().hold_lock("conf/zarr.json", Duration::ZERO).unwrap();
    assert!(matches!(other.clone().hold_lock("conf/zarr.json", Duration::from_millis(50)), Err(Error::Busy(_))), "{name}: held");
    drop(held);
    drop(other.clone().hold_lock("conf/zarr.json", Duration::from_secs(5)).unwrap());
    let left: Vec<String> = s.list_dir("conf").unwrap().into_iter().map(|e| e.name).filter(|n| n.contains("zarrfs-lock")).collect();
    assert!(left.is_empty(), "{name}: lock left behind: {left:?}");
    println!("conformance ({name}): passed");
}

#[test]
fn every_store_passes_the_conformance_suite() {
    for b in backends() {
        suite(&b);
    }
}

#[test]
fn an_archive_refuses_every_write() {
    if common::backend::is_s3() {
        return;
    }
    let zip = common::fixtures().join("zip/zarr-python.zip");
    let store: Arc<dyn Store> = Location::parse(zip.as_os_str()).unwrap().open(&RemoteOptions::default()).unwrap();
    assert!(store.get("zarr.json", 1 << 20).unwrap().is_some() || store.get(".zgroup", 1 << 20).unwrap().is_some());
    assert!(matches!(store.set("k", b"v"), Err(Error::ReadOnly)));
    assert!(matches!(store.set_if("k", b"v", Expect::Absent), Err(Error::ReadOnly)));
    assert!(matches!(store.delete_if("k", Expect::Any), Err(Error::ReadOnly)));
    assert!(matches!(store.clone().hold_lock("zarr.json", Duration::ZERO), Err(Error::ReadOnly)));
}
