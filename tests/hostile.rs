//! Off the happy path, through real mounts: other users, links out of the store, FIFOs and huge
//! objects, decompression bombs, absurd sizes in metadata, a store moved or deleted while
//! mounted, stray chunks past the stored shape, options that make no sense. Every wait is
//! bounded, so a hang fails the test instead of stalling the run.

mod common;

use std::io::Write;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Mount, bin};

/// A v3 array document.
fn array_doc(shape: &str, chunks: &str, dtype: &str, codecs: &str) -> String {
    format!(
        r#"{{"zarr_format": 3, "node_type": "array", "shape": {shape}, "data_type": "{dtype}",
  "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": {chunks}}}}},
  "chunk_key_encoding": {{"name": "default", "configuration": {{"separator": "/"}}}},
  "fill_value": 0, "codecs": {codecs}}}"#
    )
}

const BYTES: &str = r#"[{"name": "bytes", "configuration": {"endian": "little"}}]"#;
const ZSTD: &str = r#"[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]"#;
const GZIP: &str = r#"[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]"#;

/// A store in a fresh temporary directory (world-traversable, for the other-user tests):
/// a root group and the given `(path, zarr.json)` nodes.
fn store(nodes: &[(&str, String)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("s.zarr");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#).unwrap();
    for (path, doc) in nodes {
        std::fs::create_dir_all(root.join(path)).unwrap();
        std::fs::write(root.join(path).join("zarr.json"), doc).unwrap();
    }
    (dir, root)
}

/// Run `f` on a thread; fail the test when it takes longer than `limit` (a hang).
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}: a hang"))
}

/// A shell command as the unprivileged user `nobody` (65534), bounded in time.
fn as_nobody(script: &str) -> Output {
    let script = script.to_string();
    within(Duration::from_secs(20), "a command as another user", move || {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", &script])
            .output()
            .expect("setpriv (util-linux)")
    })
}

/// Tests that mount a tmpfs, bind /dev/log or switch users need root (CI runs as root).
fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("not root: this test is skipped");
    }
    root
}

/// Runs its closure when dropped: cleanup that happens even when an assertion fails.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// A 1 MiB tmpfs on `path` (created here), unmounted when the guard drops.
fn small_tmpfs(path: &Path) -> OnDrop<impl FnMut()> {
    std::fs::create_dir(path).unwrap();
    assert!(Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(path).status().unwrap().success());
    let path = path.to_path_buf();
    OnDrop(move || {
        let _ = Command::new("umount").arg("-l").arg(&path).status();
    })
}

fn sh(script: &str) -> Output {
    Command::new("sh").args(["-c", script]).output().unwrap()
}

#[test]
fn a_user_mounts_without_user_allow_other_and_a_killed_daemons_mount_goes() {
    if !root() {
        return;
    }
    // A user mounts through the setuid fusermount3, which opens /dev/fuse as the user: 0666 on
    // a stock system, 0600 in some containers. Opened up for the test, and restored after.
    let mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o7777;
    std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).unwrap();
    let _restore = OnDrop(move || {
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode));
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (store, mnt) = (dir.path().join("store"), dir.path().join("mnt"));
    assert!(Command::new("cp").arg("-r").arg(common::fixtures().join("v3.zarr")).arg(&store).status().unwrap().success());
    std::fs::create_dir(&mnt).unwrap();
    assert!(Command::new("chown").args(["-R", "65534:65534"]).arg(&store).arg(&mnt).status().unwrap().success());
    let exe = dir.path().join("zarrfs");
    std::fs::copy(bin(), &exe).unwrap();
    let mut daemon = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["mount", "-f"])
        .arg(&store)
        .arg(&mnt)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _unmount = common::UnmountOnDrop(mnt.clone());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !common::is_mounted(&mnt) {
        if let Some(status) = daemon.try_wait().unwrap() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut daemon.stderr.take().unwrap(), &mut err);
            panic!("the user's mount failed ({status}): {err}");
        }
        assert!(std::time::Instant::now() < deadline, "the user's mount did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    // auto_unmount is on (fusermount3 is installed), but without user_allow_other fusermount3
    // cannot watch: the mount is the user's alone and the daemon's helper watches it.
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info.lines().find(|l| l.split(' ').nth(4) == mnt.to_str()).unwrap().to_string();
    let conf = std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    if !conf.lines().any(|l| l.trim() == "user_allow_other") {
        assert!(!line.contains("allow_other"), "{line}");
    }
    common::unmount_helper_of(daemon.id());
    let read = as_nobody(&format!("wc -c < {}", mnt.join("shapes/d1/data").display()));
    assert_eq!(String::from_utf8_lossy(&read.stdout).trim(), "17", "{read:?}");
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while common::is_mounted(&mnt) {
        assert!(std::time::Instant::now() < deadline, "the killed daemon's helper did not unmount the user's mount");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn other_users_may_do_what_the_shown_owner_and_modes_allow_and_no_more() {
    if !root() {
        return;
    }
    let (_dir, root) = store(&[("a", array_doc("[4, 4]", "[2, 4]", "uint8", BYTES))]);
    let m = Mount::new(&root, &["-o", "allow_other"]);
    std::fs::set_permissions(m.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = m.path("a/data");
    std::fs::OpenOptions::new().write(true).open(&data).unwrap().write_all_at(&[7; 16], 0).unwrap();
    let before = common::snapshot(&root);
    let d = data.display();
    // Reading is what 0644 allows everyone.
    let read = as_nobody(&format!("cat {d} | od -An -tu1 | head -1"));
    assert!(read.status.success() && String::from_utf8_lossy(&read.stdout).contains('7'), "{read:?}");
    for (what, script) in [
        ("dd into data", format!("printf X | dd of={d} conv=notrunc status=none")),
        ("truncate data", format!("truncate -s 0 {d}")),
        ("append to data", format!("printf 'XXXX' >> {d}")),
        ("write to prepend", format!("printf XXXXXXXX > {}", m.path("a/prepend").display())),
        ("rewrite a document", format!("printf '{{}}' > {}", m.path("a/zarr.json").display())),
        ("rm", format!("rm -f {d}")),
        ("mkdir", format!("mkdir {}", m.path("new").display())),
        ("mv", format!("mv {} {}", m.path("a").display(), m.path("b").display())),
        ("create", format!("touch {}", m.path("a/new").display())),
        ("rm -r", format!("rm -rf {}", m.path("a").display())),
    ] {
        let out = as_nobody(&script);
        assert!(!out.status.success(), "{what} as another user succeeded");
        assert!(String::from_utf8_lossy(&out.stderr).contains("ermission denied"), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(common::snapshot(&root), before, "nothing another user did was stored");
    // The owner cannot change what the mount decides either: EPERM, never a silent success.
    for (what, script) in
        [("chmod", format!("chmod 600 {d}")), ("chown", format!("chown 65534 {d}")), ("touch", format!("touch -d 2001-01-01 {d}"))]
    {
        let out = sh(&script);
        assert!(!out.status.success(), "{what} succeeded");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not permitted"), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let meta = std::fs::metadata(&data).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    assert_eq!(common::snapshot(&root), before);
}

#[test]
fn links_that_leave_the_store_are_never_followed() {
    let (dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    // A metadata document that is a link to a file outside.
    std::fs::create_dir(root.join("leak")).unwrap();
    std::os::unix::fs::symlink(&secret, root.join("leak/zarr.json")).unwrap();
    // An array directory that is a link to an array outside, and a chunk linked out.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("zarr.json"), array_doc("[4]", "[4]", "uint8", BYTES)).unwrap();
    std::os::unix::fs::symlink("../outside", root.join("out")).unwrap();
    std::fs::create_dir_all(root.join("a/c")).unwrap();
    std::os::unix::fs::symlink(&secret, root.join("a/c/0")).unwrap();
    let m = Mount::new(&root, &[]);
    assert!(std::fs::read(m.path("leak/zarr.json")).is_err(), "a link out is not read");
    let why = std::fs::read_to_string(m.path("leak/error")).unwrap();
    assert!(why.contains("leads out of the store"), "{why}");
    let why = std::fs::read_to_string(m.path("out/error")).unwrap();
    assert!(why.contains("leads out of the store"), "{why}");
    assert!(!m.path("out/data").exists());
    let err = std::fs::read(m.path("a/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    // Writing through the array linked out stores nothing outside.
    assert!(std::fs::OpenOptions::new().write(true).open(m.path("out/data")).is_err());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    assert!(m.log_text().contains("leads out of the store"), "{}", m.log_text());
    let ls = std::fs::read_dir(&m.mountpoint).unwrap().count();
    assert!(ls >= 3);
}

#[test]
fn fifos_and_huge_objects_are_refused_without_hanging_or_reading_them() {
    // Chunks of a page each: a refused chunk fails only the reads of its own pages.
    let (_dir, root) =
        store(&[("a", array_doc("[16384]", "[4096]", "uint8", BYTES)), ("z", array_doc("[16384]", "[4096]", "uint8", ZSTD))]);
    std::fs::create_dir_all(root.join("a/c")).unwrap();
    std::fs::create_dir_all(root.join("z/c")).unwrap();
    let fifo = std::ffi::CString::new(root.join("a/c/0").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    // 16 GiB (sparse) where a chunk holds 4 KiB, plain and compressed.
    std::fs::File::create(root.join("a/c/1")).unwrap().set_len(16 << 30).unwrap();
    std::fs::File::create(root.join("z/c/1")).unwrap().set_len(16 << 30).unwrap();
    let m = Mount::new(&root, &["--threads", "4"]);
    // More readers of the FIFO chunk than there are request threads: none may block.
    let data = m.path("a/data");
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let data = data.clone();
            std::thread::spawn(move || std::fs::File::open(&data).and_then(|f| f.read_at(&mut [0u8; 16], 0)).map_err(|e| e.raw_os_error()))
        })
        .collect();
    let results = within(Duration::from_secs(20), "reads of a FIFO chunk", move || {
        readers.into_iter().map(|r| r.join().unwrap()).collect::<Vec<_>>()
    });
    assert!(results.iter().all(|r| *r == Err(Some(libc::EIO))), "{results:?}");
    for array in ["a", "z"] {
        let f = std::fs::File::open(m.path(&format!("{array}/data"))).unwrap();
        let got = f.read_at(&mut [0u8; 16], 4096).map_err(|e| e.raw_os_error());
        assert_eq!(got, Err(Some(libc::EIO)), "{array}: the 16 GiB chunk");
        // The chunks after them still read.
        let mut buf = [1u8; 16];
        f.read_exact_at(&mut buf, 8192).unwrap();
        assert_eq!(buf, [0; 16]);
    }
    let mp = m.mountpoint.clone();
    within(Duration::from_secs(10), "ls after the refused reads", move || std::fs::read_dir(mp).unwrap().count());
    assert!(m.rss() < 256 << 20, "the daemon read a huge object: RSS {} MiB", m.rss() >> 20);
    let log = m.log_text();
    assert!(log.contains("not a regular file") && log.contains("17179869184 bytes"), "{log}");
}

/// Zeros as a zstd frame of 1 GiB without a content size, as gzip, and as a frame that says
/// 64 MiB: a few dozen KiB each, where the chunk holds 64 bytes.
fn bombs() -> Vec<(&'static str, Vec<u8>)> {
    let zeros = vec![0u8; 1 << 20];
    let mut z = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    z.include_contentsize(false).unwrap();
    // Deflate stops at about 1000:1, so 16 MiB keeps the gzip bomb small enough to be read.
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for i in 0..1024 {
        z.write_all(&zeros).unwrap();
        if i < 16 {
            g.write_all(&zeros).unwrap();
        }
    }
    let sized = zstd::bulk::compress(&vec![0u8; 64 << 20], 1).unwrap();
    vec![("zstd", z.finish().unwrap()), ("gzip", g.finish().unwrap()), ("zstd-sized", sized)]
}

#[test]
fn decompression_bombs_stop_at_the_chunk_size() {
    let (_dir, root) = store(&[("zstd", array_doc("[64]", "[64]", "uint8", ZSTD)), ("gzip", array_doc("[64]", "[64]", "uint8", GZIP))]);
    for (codec, bomb) in bombs() {
        let array = if codec == "gzip" { "gzip" } else { "zstd" };
        std::fs::create_dir_all(root.join(array).join("c")).unwrap();
        std::fs::write(root.join(array).join("c/0"), &bomb).unwrap();
        let m = Mount::new(&root, &[]);
        let paths: Vec<PathBuf> = (0..8).map(|_| m.path(&format!("{array}/data"))).collect();
        let results = within(Duration::from_secs(30), "reads of a bomb", move || {
            let readers: Vec<_> =
                paths.into_iter().map(|p| std::thread::spawn(move || std::fs::read(p).map_err(|e| e.raw_os_error()))).collect();
            readers.into_iter().map(|r| r.join().unwrap()).collect::<Vec<_>>()
        });
        assert!(results.iter().all(|r| *r == Err(Some(libc::EIO))), "{codec}: {results:?}");
        assert!(m.rss() < 256 << 20, "{codec}: the bomb was inflated: RSS {} MiB", m.rss() >> 20);
        assert!(m.log_text().contains("more than the 64 bytes"), "{codec}: {}", m.log_text());
    }
}

#[test]
fn absurd_sizes_in_metadata_show_an_error_and_the_mount_lives() {
    let shard =
        |inner: &str| format!(r#"[{{"name": "sharding_indexed", "configuration": {{"chunk_shape": {inner}, "codecs": {BYTES}}}}}]"#);
    let cases = [
        ("wrap", array_doc("[4294967297, 4294967296]", "[1, 1]", "uint8", BYTES), "do not fit in a file"),
        ("bigchunk", array_doc("[4, 4]", "[1048576, 1048576]", "uint64", BYTES), "more than 2147483648 bytes"),
        ("hugechunk", array_doc("[4, 4]", "[1099511627776, 1099511627776]", "uint8", BYTES), "more than 2147483648 bytes"),
        ("shard", array_doc("[4]", "[4611686018427387904]", "uint8", &shard("[1]")), "more than 2147483648 bytes"),
        ("maxshape", array_doc("[18446744073709551615]", "[4]", "int32", BYTES), "more than 2^62"),
        ("index", array_doc("[4]", "[1073741824]", "uint8", &shard("[1]")), "shard index"),
    ];
    let nodes: Vec<(&str, String)> = cases.iter().map(|(p, d, _)| (*p, d.clone())).collect();
    let (_dir, root) = store(&nodes);
    let before = common::snapshot(&root);
    let m = Mount::new(&root, &[]);
    for (path, _, why) in &cases {
        let msg = std::fs::read_to_string(m.path(&format!("{path}/error"))).unwrap_or_else(|e| panic!("{path}/error: {e}"));
        assert!(msg.contains(why), "{path}: {msg}");
        assert!(!m.path(&format!("{path}/data")).exists(), "{path}");
    }
    // A small chunk bound shows the same for ordinary arrays, and others stay served.
    drop(m);
    let (_dir2, root2) =
        store(&[("big", array_doc("[64]", "[64]", "uint64", BYTES)), ("small", array_doc("[64]", "[8]", "uint64", BYTES))]);
    let m = Mount::new(&root2, &["-o", "max_chunk_size=256"]);
    assert!(std::fs::read_to_string(m.path("big/error")).unwrap().contains("more than 256 bytes"));
    assert_eq!(std::fs::read(m.path("small/data")).unwrap(), vec![0u8; 512]);
    drop(m);
    assert_eq!(common::snapshot(&root), before);
}

#[test]
fn a_store_moved_or_deleted_while_mounted_is_never_recreated() {
    let (dir, root) = store(&[("a", array_doc("[4, 4]", "[2, 4]", "uint8", BYTES))]);
    let m = Mount::new(&root, &[]);
    let moved = dir.path().join("moved.zarr");
    std::fs::rename(&root, &moved).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(m.path("a/data")).unwrap();
    f.write_all_at(&[5; 8], 0).unwrap();
    f.sync_all().unwrap();
    assert!(!root.exists(), "the old path was created again");
    assert_eq!(std::fs::read(moved.join("a/c/0/0")).unwrap(), vec![5; 8]);
    // Deleted: writes fail, and nothing appears anywhere.
    std::fs::remove_dir_all(&moved).unwrap();
    f.write_all_at(&[6; 8], 8).unwrap();
    let err = f.sync_all().unwrap_err();
    assert!(matches!(err.raw_os_error(), Some(libc::ENOENT | libc::EIO)), "{err}");
    assert!(!root.exists() && !moved.exists());
}

#[test]
fn chunks_past_the_stored_shape_never_come_back_with_a_growth() {
    // Strays as a failed growth or a crash during one leaves them: chunks past shape[0].
    let (_dir, root) = store(&[("a", array_doc("[4, 4]", "[2, 4]", "uint8", BYTES))]);
    std::fs::create_dir_all(root.join("a/c/1")).unwrap();
    std::fs::write(root.join("a/c/1/0"), [1u8; 8]).unwrap();
    for stray in ["2", "3", "50"] {
        std::fs::create_dir_all(root.join("a/c").join(stray)).unwrap();
        std::fs::write(root.join("a/c").join(stray).join("0"), [9u8; 8]).unwrap();
    }
    let m = Mount::new(&root, &[]);
    let data = m.path("a/data");
    // Grow by truncate to 8 rows, then append one row as `cat >>` does.
    Command::new("truncate").args(["-s", "32"]).arg(&data).status().unwrap();
    std::fs::OpenOptions::new().append(true).open(&data).unwrap().write_all(&[3; 4]).unwrap();
    let bytes = std::fs::read(&data).unwrap();
    let mut want = vec![0u8; 36];
    want[8..16].fill(1);
    want[32..].fill(3);
    assert_eq!(bytes, want);
    drop(m);
    assert!(!root.join("a/c/2/0").exists() && !root.join("a/c/3/0").exists(), "strays inside the new shape are deleted");
    assert!(root.join("a/c/50/0").exists(), "chunks past the new shape are not touched");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(root.join("a/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["shape"], serde_json::json!([9, 4]));
}

#[test]
fn nonsense_options_are_refused_at_mount_time() {
    let (dir, root) = store(&[]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for (opts, why) in [
        (vec!["-o", "threads=20000"], "from 1 to 1024"),
        (vec!["--threads", "0"], "from 1 to 1024"),
        (vec!["-o", "cache_size=99999999T"], "too large"),
        (vec!["-o", "spool_dir=/nonexistent/x"], "spool directory /nonexistent/x"),
    ] {
        let out = Command::new(bin()).arg("mount").arg(&root).arg(&mnt).args(&opts).output().unwrap();
        assert!(!out.status.success(), "{opts:?} mounted");
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{opts:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!common::is_mounted(&mnt));
    }
    assert!(!Path::new("/nonexistent").exists());
    // The last of ro and rw wins, as in libfuse.
    let (_d, root2) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let m = Mount::new(&root2, &["-o", "ro,rw"]);
    std::fs::OpenOptions::new().write(true).open(m.path("a/data")).unwrap().write_all_at(&[1], 0).unwrap();
    drop(m);
    let m = Mount::new(&root2, &["-o", "rw,ro"]);
    let err = std::fs::OpenOptions::new().write(true).open(m.path("a/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
}

#[test]
fn unmount_touches_only_zarrfs_mounts() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmpfs = dir.path().join("t");
    let mounted = small_tmpfs(&tmpfs);
    // A planted stats file naming another process.
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::create_dir(tmpfs.join(".zarrfs")).unwrap();
    std::fs::write(tmpfs.join(".zarrfs/stats"), format!("{{\"pid\": {}}}", victim.id())).unwrap();
    let out = Command::new(bin()).arg("unmount").arg(&tmpfs).output().unwrap();
    let still = common::is_mounted(&tmpfs);
    drop(mounted);
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(!out.status.success() && still && alive, "a tmpfs was unmounted or its planted pid signalled: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("a tmpfs mount, not a zarrfs one"), "{out:?}");
    let plain = Command::new(bin()).arg("unmount").arg(dir.path()).output().unwrap();
    assert!(!plain.status.success());
}

#[test]
fn a_close_of_a_reader_does_not_report_a_writers_error() {
    if !root() {
        return;
    }
    // A 1 MiB tmpfs store fills up: the writer's close gets ENOSPC, a reader's close does not.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s.zarr");
    let _mounted = small_tmpfs(&root);
    std::fs::write(root.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    std::fs::create_dir(root.join("a")).unwrap();
    std::fs::write(root.join("a/zarr.json"), array_doc("[4, 65536]", "[1, 65536]", "uint8", BYTES)).unwrap();
    let m = Mount::new(&root, &[]);
    let data = m.path("a/data");
    let reader = std::fs::File::open(&data).unwrap();
    let writer = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    // Noise does not compress away: 4 MiB of it cannot fit.
    let mut rng = common::Lcg(7);
    let noise: Vec<u8> = (0..64 << 16).map(|_| rng.next() as u8).collect();
    writer.write_all_at(&noise[..4 << 16], 0).unwrap();
    let grow = writer.write_all_at(&noise, 4 << 16);
    use std::os::fd::IntoRawFd;
    let close = |f: std::fs::File| {
        let fd = f.into_raw_fd();
        // SAFETY: we own fd.
        if unsafe { libc::close(fd) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    };
    assert!(close(reader).is_ok(), "a reader's close reported a writer's error");
    let err = grow.err().or_else(|| close(writer).err()).expect("the writer sees the full disk");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
}

#[test]
fn a_background_daemon_reports_its_errors_to_syslog() {
    if !root() {
        return;
    }
    let socket = Path::new("/dev/log");
    if socket.exists() {
        eprintln!("/dev/log belongs to a syslog daemon on this machine: the syslog lines are not checked here");
        return;
    }
    let log = std::os::unix::net::UnixDatagram::bind(socket).unwrap();
    let _remove = OnDrop(|| {
        let _ = std::fs::remove_file("/dev/log");
    });
    log.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (dir, root) = store(&[("a", array_doc("[4096]", "[4096]", "uint8", ZSTD))]);
    std::fs::create_dir_all(root.join("a/c")).unwrap();
    std::fs::write(root.join("a/c/0"), b"not a zstd frame").unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    assert!(Command::new(bin()).arg("mount").arg(&root).arg(&mnt).status().unwrap().success());
    let _unmount = OnDrop(|| {
        let _ = Command::new(bin()).arg("unmount").arg(&mnt).status();
    });
    let err = std::fs::read(mnt.join("a/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    let line = loop {
        let n = log.recv(&mut buf).unwrap_or_else(|e| panic!("no syslog line names the chunk ({e}); seen: {seen:?}"));
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        if line.contains("a/c/0") {
            break line;
        }
        seen.push(line);
    };
    // Facility daemon (3), severity error (3): <27>.
    assert!(line.starts_with("<27>zarrfs["), "{line}");
    assert!(line.contains("zstd"), "{line}");
}

#[test]
fn damaged_text_is_shown_exactly_and_logged() {
    let doc = |codecs: &str| array_doc("[2]", "[2]", "string", codecs).replace(r#""fill_value": 0"#, r#""fill_value": """#);
    let (_dir, root) = store(&[("s", doc(r#"[{"name": "vlen-utf8"}]"#)), ("broken", doc(r#"[{"name": "vlen-utf8"}]"#))]);
    // vlen-utf8: u32 count, then u32 length and bytes per element; the first is not UTF-8.
    let mut chunk = 2u32.to_le_bytes().to_vec();
    for element in [&b"a\xffb"[..], b"ok"] {
        chunk.extend((element.len() as u32).to_le_bytes());
        chunk.extend(element);
    }
    for (array, bytes) in [("s", chunk), ("broken", b"\x07\0\0\0garbage".to_vec())] {
        std::fs::create_dir_all(root.join(array).join("c")).unwrap();
        std::fs::write(root.join(array).join("c/0"), bytes).unwrap();
    }
    let m = Mount::new(&root, &[]);
    assert_eq!(std::fs::read(m.path("s/data")).unwrap(), b"a\\xffb\nok\n");
    let err = std::fs::metadata(m.path("broken/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    let log = m.log_text();
    assert!(log.contains("not UTF-8"), "{log}");
    assert!(log.contains("the text view cannot be rendered") && log.contains("/broken"), "{log}");
}

#[test]
fn a_write_into_a_chunk_another_program_rewrote_keeps_that_programs_bytes() {
    let (_dir, root) = store(&[("a", array_doc("[3, 64]", "[1, 64]", "uint8", BYTES))]);
    for row in 0..3 {
        std::fs::create_dir_all(root.join(format!("a/c/{row}"))).unwrap();
        std::fs::write(root.join(format!("a/c/{row}/0")), [1u8; 64]).unwrap();
    }
    let m = Mount::new(&root, &[]);
    let data = m.path("a/data");
    // Every chunk is read, so the mount caches all three.
    assert_eq!(std::fs::read(&data).unwrap(), vec![1u8; 192]);
    std::thread::sleep(Duration::from_millis(50));
    // Another program rewrites row 0 in place (same inode, same size), replaces row 1 by a
    // rename, and deletes row 2.
    std::fs::write(root.join("a/c/0/0"), [7u8; 64]).unwrap();
    std::fs::write(root.join("a/c/1/new"), [8u8; 64]).unwrap();
    std::fs::rename(root.join("a/c/1/new"), root.join("a/c/1/0")).unwrap();
    std::fs::remove_file(root.join("a/c/2/0")).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    for row in 0..3u64 {
        file.write_all_at(&[9], row * 64 + 3).unwrap();
    }
    drop(file);
    let expect = |v: u8| {
        let mut c = vec![v; 64];
        c[3] = 9;
        c
    };
    assert_eq!(std::fs::read(root.join("a/c/0/0")).unwrap(), expect(7), "rewritten in place");
    assert_eq!(std::fs::read(root.join("a/c/1/0")).unwrap(), expect(8), "replaced by a rename");
    assert_eq!(std::fs::read(root.join("a/c/2/0")).unwrap(), expect(0), "deleted: fill");
}
