//! Off the happy path, through real mounts: other users, links out of the store, FIFOs and huge
//! objects, decompression bombs, absurd sizes in metadata, a store moved or deleted while
//! mounted, stray chunks past the stored shape, options that make no sense. Every wait is
//! bounded, so a hang fails the test instead of stalling the run.

mod common;

use std::io::Write;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::probe::{self, BYTES, GZIP, OnDrop, ZSTD, array_doc, as_nobody, root, sh, small_tmpfs, store, within};
use common::{Mount, bin};

#[test]
fn a_user_mounts_without_user_allow_other_and_a_killed_daemons_mount_goes() {
    if !root() {
        return;
    }
    let user = probe::UserMount::new();
    let before = std::fs::metadata("/dev/fuse").unwrap().permissions().mode();
    let out = user.run(
        r#"
        trap 'kill -9 $daemon 2>/dev/null; umount -l {mnt} 2>/dev/null' EXIT
        setpriv --reuid=65534 --regid=65534 --clear-groups {exe} mount -f {store} {mnt} 2>{dir}/daemon.log &
        daemon=$!
        wait_for mounted || { echo NOT-MOUNTED; cat {dir}/daemon.log; exit 1; }
        echo "MOUNTINFO $(grep " {mnt} " /proc/self/mountinfo)"
        wait_for pgrep -P $daemon -f unmount-when-gone >/dev/null && echo HELPER
        echo "READ $(as_user sh -c 'wc -c < {mnt}/shapes/d1/data')"
        kill -9 $daemon
        wait_for sh -c '! grep -q " {mnt} " /proc/self/mountinfo' && echo GONE
        "#,
        Duration::from_secs(60),
    );
    let mnt = user.mnt.clone();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(std::fs::metadata("/dev/fuse").unwrap().permissions().mode(), before, "the machine's /dev/fuse was changed");
    assert!(!common::is_mounted(&mnt), "the user's mount shows outside its namespace");
    let line = said
        .lines()
        .find(|l| l.starts_with("MOUNTINFO"))
        .unwrap_or_else(|| panic!("the user's mount failed: {said} {}", String::from_utf8_lossy(&out.stderr)));
    // Without allow_other the mount is the user's alone, whatever /etc/fuse.conf allows, and the
    // daemon's own helper unmounts it when the daemon is killed.
    assert!(!line.contains("allow_other"), "{line}");
    assert!(said.contains("HELPER"), "no unmount-when-gone helper: {said}");
    assert!(said.contains("READ 17"), "{said}");
    assert!(said.contains("GONE"), "the killed daemon's helper did not unmount the user's mount: {said}");
}

#[test]
fn a_user_who_cannot_mount_is_told_why_and_how() {
    if !root() {
        return;
    }
    if std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o006 == 0o006 {
        eprintln!("/dev/fuse is open to every user here: the refusal is not met");
        return;
    }
    let (dir, root) = store(&[]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    assert!(Command::new("chown").args(["-R", "65534:65534"]).arg(&root).arg(&mnt).status().unwrap().success());
    let (_bin_dir, exe) = probe::binary_for_others();
    // fusermount3 opens /dev/fuse as the user too, and without it there is nothing to fall back to.
    for fusermount in ["/usr/bin/fusermount3", "/nonexistent/fusermount3"] {
        let out = probe::spawn(
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&exe)
                .args(["mount", "-f"])
                .arg(&root)
                .arg(&mnt)
                .env("FUSERMOUNT_PATH", fusermount)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped()),
        )
        .wait_with_output()
        .unwrap();
        let _unmount = common::UnmountOnDrop(mnt.clone());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("cannot open /dev/fuse (Permission denied") && err.contains("chmod 0666 /dev/fuse"), "{fusermount}: {err}");
    }
}

#[test]
fn a_private_store_is_read_by_no_other_user() {
    if !root() {
        return;
    }
    // A store only its owner may read (0700, files 0600), and one open to all with one private
    // group inside.
    let (_dir, private) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    std::fs::create_dir_all(private.join("a/c")).unwrap();
    std::fs::write(private.join("a/c/0"), [5u8; 4]).unwrap();
    assert!(Command::new("chmod").args(["-R", "go-rwx"]).arg(&private).status().unwrap().success());
    let (_dir2, shared) =
        store(&[("open", array_doc("[4]", "[4]", "uint8", BYTES)), ("p/hidden", array_doc("[4]", "[4]", "uint8", BYTES))]);
    std::fs::write(shared.join("p/zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    std::fs::set_permissions(shared.join("p"), std::fs::Permissions::from_mode(0o700)).unwrap();
    // A document others may not read: its array's files are the owner's.
    std::fs::set_permissions(shared.join("open/zarr.json"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(shared.join("doc_open")).unwrap();
    std::fs::write(shared.join("doc_open/zarr.json"), array_doc("[4]", "[4]", "uint8", BYTES)).unwrap();
    for opts in [&[][..], &["-o", "allow_root"], &["-o", "allow_other"]] {
        let m = Mount::new(&private, opts);
        std::fs::set_permissions(m.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let line = probe::mountinfo_line(&m.mountpoint);
        if opts.is_empty() {
            assert!(!line.contains("allow_other"), "a mount without allow_other lets others in: {line}");
        }
        assert_eq!(std::fs::read(m.path("a/data")).unwrap(), [5u8; 4], "the owner reads");
        for what in ["a/data", "a/zarr.json", "zarr.json"] {
            let out = as_nobody(&format!("od -An -tu1 {}", m.path(what).display()));
            assert!(!out.status.success(), "{opts:?}: another user read {what} of a private store: {out:?}");
        }
        let ls = as_nobody(&format!("ls {}", m.mountpoint.display()));
        assert!(!ls.status.success(), "{opts:?}: another user listed a private store: {ls:?}");
    }
    let m = Mount::new(&shared, &["-o", "allow_other"]);
    std::fs::set_permissions(m.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ok = as_nobody(&format!("od -An -tu1 {}", m.path("doc_open/data").display()));
    assert!(ok.status.success(), "what the store lets everyone read is read through a shared mount: {ok:?}");
    for what in ["p/hidden/data", "p/zarr.json", "open/data", "open/zarr.json"] {
        let out = as_nobody(&format!("od -An -tu1 {}", m.path(what).display()));
        assert!(!out.status.success(), "another user read {what}, which the store keeps from them: {out:?}");
    }
    // Nor the daemon's own reports.
    let stats = as_nobody(&format!("cat {}", m.path(".zarrfs/stats").display()));
    assert!(!stats.status.success(), "another user read the daemon's stats: {stats:?}");
}

#[test]
fn a_shared_mount_of_a_reference_set_serves_no_target_the_target_keeps_from_others() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(dir.path(), 0o755);
    // Three arrays, each one chunk of a target: open to all, private (0600), and open to all
    // but in a private directory.
    std::fs::create_dir(dir.path().join("hidden")).unwrap();
    for (target, bytes, m) in [("open.bin", 1u8, 0o644), ("private.bin", 2, 0o600), ("hidden/t.bin", 3, 0o644)] {
        std::fs::write(dir.path().join(target), [bytes; 4]).unwrap();
        mode(&dir.path().join(target), m);
    }
    mode(&dir.path().join("hidden"), 0o700);
    let zarray = r#"{\"zarr_format\": 2, \"shape\": [4], \"chunks\": [4], \"dtype\": \"|u1\", \"compressor\": null, \"filters\": null, \"fill_value\": 0, \"order\": \"C\"}"#;
    let set = dir.path().join("refs.json");
    std::fs::write(
        &set,
        format!(
            r#"{{".zgroup": "{{\"zarr_format\": 2}}", "o/.zarray": "{zarray}", "o/0": ["open.bin", 0, 4],
                "p/.zarray": "{zarray}", "p/0": ["private.bin", 0, 4], "h/.zarray": "{zarray}", "h/0": ["hidden/t.bin", 0, 4]}}"#
        ),
    )
    .unwrap();
    mode(&set, 0o644);
    let m = Mount::new(&set, &["-o", "allow_other"]);
    mode(m.dir.path(), 0o755);
    let read = as_nobody(&format!("od -An -tu1 {}", m.path("o/data").display()));
    assert!(read.status.success() && String::from_utf8_lossy(&read.stdout).split_whitespace().all(|v| v == "1"), "{read:?}");
    for array in ["p", "h"] {
        let out = as_nobody(&format!("od -An -tu1 {}", m.path(&format!("{array}/data")).display()));
        assert!(!out.status.success(), "another user read {array}, whose target is kept from them: {out:?}");
        // Its bytes would reach the page cache every reader shares: the owner is refused too.
        let owner = std::fs::read(m.path(&format!("{array}/data")));
        assert_eq!(owner.map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)), "{array}: {}", m.log_text());
    }
    drop(m);
    // A mount of the owner's alone serves them all.
    let m = Mount::new(&set, &[]);
    for (array, bytes) in [("o", 1u8), ("p", 2), ("h", 3)] {
        assert_eq!(std::fs::read(m.path(&format!("{array}/data"))).unwrap(), [bytes; 4], "{array}");
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
    // A damaged chunk's lines stand as empty ones (the size says so); reading them fails.
    assert_eq!(std::fs::metadata(m.path("broken/data")).unwrap().len(), 2);
    let err = std::fs::read(m.path("broken/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    let log = m.log_text();
    assert!(log.contains("not UTF-8"), "{log}");
    assert!(log.contains("lines of the text cannot be rendered") && log.contains("/broken"), "{log}");
}

#[test]
fn one_damaged_chunk_of_a_text_fails_only_its_own_lines() {
    let doc = array_doc("[6000]", "[2000]", "string", r#"[{"name": "vlen-utf8"}]"#).replace(r#""fill_value": 0"#, r#""fill_value": """#);
    let (_dir, root) = store(&[("t", doc)]);
    std::fs::create_dir_all(root.join("t/c")).unwrap();
    let chunk = |word: &[u8]| {
        let mut c = 2000u32.to_le_bytes().to_vec();
        for _ in 0..2000 {
            c.extend((word.len() as u32).to_le_bytes());
            c.extend(word);
        }
        c
    };
    std::fs::write(root.join("t/c/0"), chunk(b"aaaa")).unwrap();
    std::fs::write(root.join("t/c/1"), b"\x07\0\0\0garbage").unwrap();
    std::fs::write(root.join("t/c/2"), chunk(b"cccc")).unwrap();
    let m = Mount::new(&root, &[]);
    let data = m.path("t/data");
    // 2000 lines of 5 bytes, 2000 empty lines standing for the damaged chunk, 2000 of 5 bytes.
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 10_000 + 2000 + 10_000);
    let f = std::fs::File::open(&data).unwrap();
    let mut first = vec![0u8; 8192];
    f.read_exact_at(&mut first, 0).unwrap();
    assert!(first.chunks(5).all(|l| l == b"aaaa\n" || b"aaaa\n".starts_with(l)));
    assert_eq!(f.read_at(&mut [0u8; 100], 10_000).unwrap_err().raw_os_error(), Some(libc::EIO), "the damaged lines");
    let mut last = vec![0u8; 5];
    f.read_exact_at(&mut last, 22_000 - 5).unwrap();
    assert_eq!(last, b"cccc\n", "lines after the damaged chunk read");
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

#[test]
fn memory_that_cannot_be_had_fails_the_request_and_the_daemon_lives() {
    // A chunk of 1.5 GiB (zeros, a few KiB as zstd) read by a daemon allowed 1 GiB of address
    // space: the read fails with ENOMEM; nothing aborts.
    let (dir, root) =
        store(&[("big", array_doc("[1610612736]", "[1610612736]", "uint8", ZSTD)), ("small", array_doc("[8]", "[8]", "uint8", BYTES))]);
    std::fs::create_dir_all(root.join("big/c")).unwrap();
    let mut frame = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    frame.set_pledged_src_size(Some(1610612736)).unwrap();
    frame.include_contentsize(true).unwrap();
    for _ in 0..1536 {
        frame.write_all(&[0u8; 1 << 20]).unwrap();
    }
    std::fs::write(root.join("big/c/0"), frame.finish().unwrap()).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let log = dir.path().join("log");
    let mut daemon = probe::spawn(
        Command::new("prlimit")
            .arg(format!("--as={}", 1u64 << 30))
            .arg(bin())
            .args(["mount", "-f"])
            .arg(&root)
            .arg(&mnt)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap()),
    );
    let _unmount = common::UnmountOnDrop(mnt.clone());
    probe::wait_mounted(&mnt, &mut daemon);
    let f = std::fs::File::open(mnt.join("big/data")).unwrap();
    let err = f.read_at(&mut [0u8; 4096], 0).unwrap_err();
    assert!(matches!(err.raw_os_error(), Some(libc::ENOMEM)), "{err}: {}", std::fs::read_to_string(&log).unwrap_or_default());
    assert!(daemon.try_wait().unwrap().is_none(), "the daemon died: {}", std::fs::read_to_string(&log).unwrap_or_default());
    assert_eq!(std::fs::read(mnt.join("small/data")).unwrap(), [0u8; 8]);
    drop(f);
    // SAFETY: signalling our child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status}: {}", std::fs::read_to_string(&log).unwrap_or_default());
}

/// The daemon's `.zarrfs/stats`.
fn stats(m: &Mount) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(m.path(".zarrfs/stats")).unwrap()).unwrap()
}

#[test]
fn a_listing_read_in_many_requests_shows_every_child_nobody_touched() {
    // 20 000 groups: a listing takes many readdir requests; half of what was read so far is
    // removed (and new ones made) between them.
    let (_dir, root) = store(&[]);
    let names: Vec<String> = (0..20_000).map(|i| format!("g{i:05}")).collect();
    for n in &names {
        std::fs::create_dir(root.join(n)).unwrap();
        std::fs::write(root.join(n).join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    }
    let m = Mount::new(&root, &[]);
    let mut listing = std::fs::read_dir(&m.mountpoint).unwrap();
    let mut seen: std::collections::HashSet<String> =
        listing.by_ref().take(3000).map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    let removed: Vec<&String> = names.iter().filter(|n| seen.contains(*n)).step_by(2).take(1000).collect();
    for n in &removed {
        std::fs::remove_dir_all(m.path(n)).unwrap();
    }
    for i in 0..100 {
        std::fs::create_dir(m.path(&format!("new{i}"))).unwrap();
    }
    seen.extend(listing.map(|e| e.unwrap().file_name().into_string().unwrap()));
    let missing: Vec<&String> = names.iter().filter(|n| !removed.contains(n) && !seen.contains(*n)).collect();
    assert!(missing.is_empty(), "{} children nobody touched were not listed, {:?}…", missing.len(), &missing[..missing.len().min(5)]);
}

/// Drop the kernel's unused dentries and inodes: it forgets them, and the daemon hears.
fn drop_kernel_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
}

#[test]
fn the_inode_table_shrinks_when_the_kernel_forgets() {
    if !root() {
        return;
    }
    let (_dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    for i in 0..200 {
        std::fs::create_dir(root.join(format!("g{i}"))).unwrap();
        std::fs::write(root.join(format!("g{i}/zarr.json")), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    }
    let m = Mount::new(&root, &[]);
    let inodes = |m: &Mount| stats(m)["inodes"].as_u64().unwrap();
    drop_kernel_caches();
    let start = inodes(&m);
    // Files made and removed, groups made and removed, a walk over every node.
    for i in 0..300 {
        std::fs::write(m.path(&format!("a/tmp{i}")), b"x").unwrap();
        std::fs::remove_file(m.path(&format!("a/tmp{i}"))).unwrap();
        std::fs::create_dir(m.path(&format!("n{i}"))).unwrap();
        std::fs::remove_dir(m.path(&format!("n{i}"))).unwrap();
    }
    let walked = Command::new("ls").arg("-lR").arg(&m.mountpoint).output().unwrap();
    assert!(walked.status.success());
    let grown = inodes(&m);
    assert!(grown > start + 400, "the walk held no inodes: {start} then {grown}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        drop_kernel_caches();
        let now = inodes(&m);
        if now <= start + 10 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the inode table held {now} inodes after the kernel forgot them ({start} before)");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn prepends_leave_no_chunks_of_old_layouts_in_the_cache() {
    let doc = array_doc("[4, 65536]", "[1, 65536]", "uint8", BYTES).replace(
        r#""chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}"#,
        r#""chunk_key_encoding": {"name": "offset", "configuration": {"offset": [0, 0]}}"#,
    );
    let (_dir, root) = store(&[("a", doc)]);
    let m = Mount::new(&root, &[]);
    let row = vec![3u8; 65536];
    for _ in 0..20 {
        common::write_and_close(&m.path("a/prepend"), std::fs::OpenOptions::new().write(true), &row).unwrap();
        // A read of everything caches every chunk, under the new layout.
        std::fs::read(m.path("a/data")).unwrap();
    }
    let bytes = stats(&m)["cache"]["bytes"].as_u64().unwrap();
    assert!(bytes < 3 * 24 * 65536, "the cache holds {bytes} bytes for an array of {}", 24 * 65536);
}

#[test]
fn a_change_on_a_full_disk_happens_with_its_consolidated_metadata_or_not_at_all() {
    if !root() {
        return;
    }
    // A store on a 1 MiB tmpfs whose root consolidates 20 arrays with 8 KiB of attributes each (a
    // document of 160 KiB), filled up so that a small document still fits but the consolidated
    // one does not.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s.zarr");
    let _mounted = small_tmpfs(&root);
    let mut doc: serde_json::Value = serde_json::from_str(&array_doc("[4]", "[4]", "uint8", BYTES)).unwrap();
    doc["attributes"] = serde_json::json!({"notes": "n".repeat(8000)});
    let mut entries = serde_json::Map::new();
    for i in 0..20 {
        std::fs::create_dir(root.join(format!("a{i}"))).unwrap();
        std::fs::write(root.join(format!("a{i}/zarr.json")), doc.to_string()).unwrap();
        entries.insert(format!("a{i}"), doc.clone());
    }
    let group = serde_json::json!({"zarr_format": 3, "node_type": "group", "attributes": {},
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": entries}});
    std::fs::write(root.join("zarr.json"), serde_json::to_vec_pretty(&group).unwrap()).unwrap();
    let filler = root.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    drop(f);
    let full = std::fs::metadata(&filler).unwrap().len();
    std::fs::File::options().write(true).open(&filler).unwrap().set_len(full - 64 * 1024).unwrap();
    let m = Mount::new(&root, &[]);
    let before = common::snapshot(&root);
    let enospc = |what: &str, out: std::process::Output| {
        assert!(!out.status.success(), "{what} succeeded on a full disk");
        assert!(String::from_utf8_lossy(&out.stderr).contains("No space left"), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    };
    enospc("mkdir", sh(&format!("mkdir {}", m.path("g").display())));
    enospc("rm -r", sh(&format!("rm -r {}", m.path("a0").display())));
    enospc("mv", sh(&format!("mv {} {}", m.path("a1").display(), m.path("b1").display())));
    let mut edited = doc.clone();
    edited["attributes"]["k"] = serde_json::json!(1);
    // (A shell does not report a failed close: the edit is checked here.)
    let opts = std::fs::OpenOptions::new().write(true).truncate(true).clone();
    let edit = common::write_and_close(&m.path("a2/zarr.json"), &opts, edited.to_string().as_bytes());
    assert_eq!(edit.map_err(|e| e.raw_os_error()), Err(Some(libc::ENOSPC)), "an attribute edit on a full disk");
    assert!(m.path("a0/data").exists() && m.path("a1/data").exists() && !m.path("g").exists());
    assert_eq!(common::snapshot(&root), before, "a change that failed left the store changed");
    // With room again, the same changes go through, consolidated metadata with them.
    std::fs::remove_file(&filler).unwrap();
    assert!(sh(&format!("rm -r {}", m.path("a0").display())).status.success());
    assert!(sh(&format!("mkdir {}", m.path("g").display())).status.success());
    drop(m);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(root.join("zarr.json")).unwrap()).unwrap();
    let listed = doc["consolidated_metadata"]["metadata"].as_object().unwrap();
    assert!(!listed.contains_key("a0") && listed.contains_key("g") && listed.len() == 20);
    // A stale consolidation (left by another tool, or a crash) is rebuilt at the next mount.
    let mut stale = doc.clone();
    stale["consolidated_metadata"]["metadata"].as_object_mut().unwrap().remove("a5");
    stale["consolidated_metadata"]["metadata"]["gone"] = serde_json::json!({"zarr_format": 3, "node_type": "group"});
    std::fs::write(root.join("zarr.json"), serde_json::to_vec_pretty(&stale).unwrap()).unwrap();
    let m = Mount::new(&root, &[]);
    let repaired = || {
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(root.join("zarr.json")).unwrap()).unwrap();
        let listed = doc["consolidated_metadata"]["metadata"].as_object().unwrap().clone();
        listed.contains_key("a5") && !listed.contains_key("gone")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !repaired() {
        assert!(std::time::Instant::now() < deadline, "stale consolidated metadata was not rebuilt at mount: {}", m.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_prepend_on_a_full_disk_fails_its_close_and_leaves_nothing_behind() {
    if !root() {
        return;
    }
    // Rows of 64 KiB, one per chunk; four rows to prepend where about two fit.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s.zarr");
    let _mounted = small_tmpfs(&root);
    std::fs::write(root.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let doc = array_doc("[2, 65536]", "[1, 65536]", "uint8", BYTES).replace(
        r#"{"name": "default", "configuration": {"separator": "/"}}"#,
        r#"{"name": "offset", "configuration": {"offset": [0, 0]}}"#,
    );
    std::fs::create_dir(root.join("a")).unwrap();
    std::fs::write(root.join("a/zarr.json"), &doc).unwrap();
    let filler = root.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    drop(f);
    let full = std::fs::metadata(&filler).unwrap().len();
    std::fs::File::options().write(true).open(&filler).unwrap().set_len(full - 160 * 1024).unwrap();
    let m = Mount::new(&root, &[]);
    let before = common::snapshot(&root.join("a"));
    let rows: Vec<u8> = (0..4 * 65536u32).map(|i| (i % 251) as u8).collect();
    let err = common::write_and_close(&m.path("a/prepend"), std::fs::OpenOptions::new().write(true), &rows).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    // Nothing stays: no chunk, no directory made for one, the document as it was.
    assert_eq!(common::snapshot(&root.join("a")), before);
    assert!(!root.join("a/c").exists() || std::fs::read_dir(root.join("a/c")).unwrap().next().is_none());
    assert_eq!(std::fs::metadata(m.path("a/data")).unwrap().len(), 2 * 65536);
}

#[test]
fn a_text_chunk_that_inflates_past_its_elements_is_refused_at_a_small_cost() {
    // Two strings, one of 1 GiB of "a": some 32 KiB as zstd.
    let doc = array_doc("[2]", "[2]", "string", r#"[{"name": "vlen-utf8"}, {"name": "zstd", "configuration": {"level": 1}}]"#)
        .replace(r#""fill_value": 0"#, r#""fill_value": """#);
    let (_dir, root) = store(&[("t", doc)]);
    std::fs::create_dir_all(root.join("t/c")).unwrap();
    let len = 1u32 << 30;
    let mut frame = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    frame.set_pledged_src_size(Some(12 + u64::from(len))).unwrap();
    frame.include_contentsize(true).unwrap();
    frame.write_all(&2u32.to_le_bytes()).unwrap();
    frame.write_all(&len.to_le_bytes()).unwrap();
    for _ in 0..1024 {
        frame.write_all(&[b'a'; 1 << 20]).unwrap();
    }
    frame.write_all(&0u32.to_le_bytes()).unwrap();
    std::fs::write(root.join("t/c/0"), frame.finish().unwrap()).unwrap();
    let m = Mount::new(&root, &[]);
    let paths: Vec<PathBuf> = (0..4).map(|_| m.path("t/data")).collect();
    within(Duration::from_secs(20), "stats of a text bomb", move || {
        for p in paths {
            let _ = std::fs::metadata(p);
        }
    });
    assert!(m.peak_rss() < 256 << 20, "a stat inflated the bomb: peak RSS {} MiB", m.peak_rss() >> 20);
    assert_eq!(std::fs::metadata(m.path("t/data")).unwrap().len(), 2, "its lines stand as empty ones");
    assert!(m.log_text().contains("decodes to more than"), "{}", m.log_text());
}

#[test]
fn links_between_directories_of_the_store_are_not_followed() {
    let (_dir, root) = store(&[("a/x", array_doc("[4]", "[4]", "uint8", BYTES))]);
    std::fs::write(root.join("a/zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    std::os::unix::fs::symlink(".", root.join("a/self")).unwrap();
    std::os::unix::fs::symlink("..", root.join("a/up")).unwrap();
    std::os::unix::fs::symlink("a", root.join("b")).unwrap();
    // A link to a directory that is no node is no node either: nothing to show an error for.
    std::fs::create_dir(root.join("plain")).unwrap();
    std::fs::write(root.join("plain/stray"), b"not a node").unwrap();
    std::os::unix::fs::symlink("plain", root.join("to-plain")).unwrap();
    let m = Mount::new(&root, &[]);
    for name in ["plain", "to-plain"] {
        assert_eq!(std::fs::metadata(m.path(name)).unwrap_err().kind(), std::io::ErrorKind::NotFound, "{name}");
    }
    let shown: Vec<String> =
        std::fs::read_dir(&m.mountpoint).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!shown.iter().any(|n| n == "plain" || n == "to-plain"), "{shown:?}");
    let mnt = m.mountpoint.clone();
    let found = within(Duration::from_secs(20), "find over linked directories", move || Command::new("find").arg(&mnt).output().unwrap());
    let listed = String::from_utf8_lossy(&found.stdout).lines().count();
    assert!(listed < 40, "a walk through links found {listed} paths");
    for link in ["a/self", "a/up", "b"] {
        let why = std::fs::read_to_string(m.path(&format!("{link}/error"))).unwrap();
        assert!(why.contains("not followed"), "{link}: {why}");
        assert!(!m.path(&format!("{link}/x")).exists());
    }
    assert!(m.path("a/x/data").exists());
}

#[test]
fn every_file_held_in_memory_counts_against_their_budget() {
    let nodes: Vec<(String, String)> = (0..5).map(|i| (format!("a{i}"), array_doc("[4]", "[4]", "uint8", BYTES))).collect();
    let nodes: Vec<(&str, String)> = nodes.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    let (_dir, root) = store(&nodes);
    let m = Mount::new(&root, &[]);
    let block = vec![b'x'; 60 << 20];
    let fill = |path: PathBuf, opts: &std::fs::OpenOptions| -> std::io::Result<std::fs::File> {
        let mut f = opts.open(path)?;
        f.write_all(&block)?;
        Ok(f)
    };
    let create = std::fs::OpenOptions::new().write(true).create(true).clone();
    // Scratch files unlinked while open, and documents being rewritten, hold memory until they
    // close: four of 60 MiB take the 256 MiB there is.
    let mut held = Vec::new();
    for i in 0..2 {
        let path = m.path(&format!("a{i}/scratch.tmp"));
        held.push(fill(path.clone(), &create).unwrap());
        std::fs::remove_file(path).unwrap();
    }
    let rewrite = std::fs::OpenOptions::new().write(true).truncate(true).clone();
    for i in 2..4 {
        held.push(fill(m.path(&format!("a{i}/zarr.json")), &rewrite).unwrap());
    }
    let err = fill(m.path("a4/scratch.tmp"), &create).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "a fifth 60 MiB file in memory: {err}");
    let in_memory = stats(&m)["in_memory_file_bytes"].as_u64().unwrap();
    assert!((4 * (60 << 20)..=256 << 20).contains(&in_memory), "{in_memory}");
    // Closed (the documents refused: they are not JSON), they hold nothing.
    drop(held);
    let _ = std::fs::remove_file(m.path("a4/scratch.tmp"));
    assert_eq!(stats(&m)["in_memory_file_bytes"].as_u64().unwrap(), 0);
    fill(m.path("a4/scratch.tmp"), &create).unwrap();
}

/// An image group's attributes, with `datasets` and `axes` as given.
fn image_group(axes: &str, datasets: &str, extra: &str) -> String {
    format!(
        r#"{{"zarr_format": 3, "node_type": "group", "attributes": {{"ome": {{"version": "0.5", {extra}
  "multiscales": [{{"axes": {axes}, "datasets": {datasets}}}]}}}}}}"#
    )
}

#[test]
fn hostile_image_and_dataset_metadata_is_bounded_and_the_mount_lives() {
    let yx = r#"[{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]"#;
    let level = |path: &str| format!(r#"{{"path": "{path}", "coordinateTransformations": [{{"type": "scale", "scale": [1, 1]}}]}}"#);
    // 200 000 levels listed (64 are read), as many channels, a level path that leaves the
    // group, a plane of 2^31 x 2^31 pixels, a coordinate of 2^40 values, a dataset with a
    // dimension of two lengths.
    let many: Vec<String> = (0..200_000).map(|i| level(&i.to_string())).collect();
    let channels: Vec<&str> = vec![r#"{"label": "c", "color": "FFFFFF"}"#; 200_000];
    let omero = format!(r#""omero": {{"channels": [{}]}},"#, channels.join(","));
    let named = |shape: &str, dims: &str| {
        let chunks = if shape.contains(',') { "[1, 1]" } else { "[1]" };
        let doc = array_doc(shape, chunks, "uint8", BYTES);
        format!("{}, \"dimension_names\": {dims}}}", doc.trim_end().trim_end_matches('}'))
    };
    let (_dir, root) = store(&[
        ("many", image_group(yx, &format!("[{}]", many.join(",")), &omero)),
        ("many/0", array_doc("[4, 4]", "[2, 2]", "uint8", BYTES)),
        ("escape", image_group(yx, &format!("[{}]", level("../many/0")), "")),
        ("huge", image_group(yx, &format!("[{}]", level("0")), "")),
        ("huge/0", array_doc("[2147483648, 2147483648]", "[1, 4096]", "uint8", BYTES)),
        ("set", r#"{"zarr_format": 3, "node_type": "group"}"#.to_string()),
        ("set/x", named("[1099511627776]", r#"["x"]"#)),
        ("set/y", named("[4]", r#"["y"]"#)),
        ("set/v", named("[4, 1099511627776]", r#"["y", "x"]"#)),
        ("clash", r#"{"zarr_format": 3, "node_type": "group"}"#.to_string()),
        ("clash/a", named("[4]", r#"["t"]"#)),
        ("clash/b", named("[5]", r#"["t"]"#)),
    ]);
    let m = Mount::new(&root, &["--read-only"]);
    let (many, huge, set) = (m.path("many"), m.path("huge"), m.path("set"));
    within(Duration::from_secs(60), "views of hostile metadata", move || {
        // The first level is read; the OME-XML names channels up to the bound.
        let tif = std::fs::read(many.join("image.ome.tif")).unwrap();
        let xml = common::tiff::pages(&tif)[0].description().unwrap();
        assert!(xml.contains("SizeC=\"1\""), "{}", &xml[..300]);
        // 2^62 bytes of pixels: its size and directories are computed, not built.
        let len = std::fs::metadata(huge.join("image.ome.tif")).unwrap().len();
        assert!(len > 1 << 62, "{len}");
        let f = std::fs::File::open(huge.join("image.ome.tif")).unwrap();
        let mut head = [0u8; 16];
        f.read_exact_at(&mut head, 0).unwrap();
        assert_eq!(&head[..4], b"II\x2b\x00", "BigTIFF");
        let first = u64::from_le_bytes(head[8..16].try_into().unwrap());
        let mut directory = vec![0u8; 4096];
        f.read_exact_at(&mut directory, first).unwrap();
        // A coordinate too long to read leaves the raster unreferenced; the dataset is 5 TiB.
        assert!(!set.join("v/data.vrt").exists());
        assert!(std::fs::metadata(set.join("dataset.nc")).unwrap().len() > 5 << 40);
    });
    assert!(!m.path("escape/image.ome.tif").exists(), "a level outside its group");
    assert!(!m.path("clash/dataset.nc").exists(), "a dimension of two lengths");
    assert!(m.rss() < 256 << 20, "the daemon holds {} MiB", m.rss() >> 20);
    let info = Command::new(bin()).args(["info", root.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(text.contains("is not a path inside the image group") && text.contains("dimension t is"), "{text}");
}
