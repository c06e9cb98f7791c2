//! Trust, round four, through real mounts: a mount point inside its store (or reached from it),
//! option values that would panic or lie, element sizes that would size everything, a log
//! file that is no file. Every wait is bounded, so a hang fails the test instead of stalling
//! the run.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::probe::{BYTES, OnDrop, array_doc, root, store, within};
use common::{Mount, bin};

/// `zarrfs mount` with `args`, bounded in time (a hang fails the test).
fn mount_command(args: Vec<std::ffi::OsString>) -> Output {
    within(Duration::from_secs(30), "zarrfs mount", move || Command::new(bin()).arg("mount").args(args).output().unwrap())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_mount_point_inside_its_store_is_refused() {
    let (dir, root) = store(&[("sub/a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    std::fs::write(root.join("sub/zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let inside = root.join("sub/m");
    std::fs::create_dir(&inside).unwrap();
    // Also when named through a link that hides where it is.
    std::os::unix::fs::symlink(root.join("sub"), dir.path().join("alias")).unwrap();
    for mountpoint in [inside.clone(), dir.path().join("alias/m")] {
        let out = mount_command(vec![root.clone().into(), mountpoint.clone().into(), "-f".into()]);
        assert!(!out.status.success(), "{}: mounted inside its store", mountpoint.display());
        assert!(stderr(&out).contains("is inside the store"), "{}", stderr(&out));
        assert!(!common::is_mounted(&inside));
    }
}

#[test]
fn a_store_whose_tree_reaches_the_mount_point_is_not_walked_through_it() {
    if !root() {
        return;
    }
    // The mount point's parent, bound (with the mount on it) into the store as a group: a walk
    // from the store would reach the mount again and again.
    let (_dir, store_root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let m = Mount::new(&store_root, &[]);
    let parent = m.mountpoint.parent().unwrap().to_path_buf();
    std::fs::write(parent.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let bound = store_root.join("g");
    std::fs::create_dir(&bound).unwrap();
    assert!(Command::new("mount").arg("--rbind").arg(&parent).arg(&bound).status().unwrap().success());
    let _unbind = OnDrop(move || {
        let _ = Command::new("umount").args(["-R", "-l"]).arg(&bound).status();
    });
    let top = m.mountpoint.clone();
    // Under the mount's own path (a temporary directory's name may end in "g" itself).
    let through = format!("{}/g/mnt", top.display());
    let found = within(Duration::from_secs(60), "a walk of the mount", move || {
        Command::new("timeout").arg("50").arg("find").arg(&top).output().unwrap()
    });
    let listed = String::from_utf8_lossy(&found.stdout);
    assert!(listed.contains("a/data"), "{listed}");
    assert!(!listed.contains(&through), "the mount was walked through itself: {listed}");
    let why = std::fs::read_to_string(m.path("g/error")).unwrap();
    assert!(why.contains("mount point that leads out of the store"), "{why}");
    assert_eq!(std::fs::read(m.path("a/data")).unwrap(), [0u8; 4], "the mount still serves");
}

#[test]
fn option_values_that_would_overflow_or_lie_are_refused_at_mount_time() {
    let (dir, root) = store(&[]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for (opts, why) in [
        (vec!["-o", "flush_timeout=18446744073709551615"], "flush_timeout 18446744073709551615: expected 1 to 86400 seconds"),
        (vec!["--flush-timeout", "0"], "flush_timeout 0: expected 1 to 86400 seconds"),
        (vec!["-o", "metadata_ttl=18446744073709551615"], "metadata_ttl"),
        (vec!["--metadata-ttl", "86401"], "metadata_ttl 86401"),
    ] {
        let mut args = vec![root.clone().into_os_string(), mnt.clone().into_os_string()];
        args.extend(opts.iter().map(Into::into));
        let out = mount_command(args);
        assert!(!out.status.success(), "{opts:?} mounted");
        assert!(stderr(&out).contains(why), "{opts:?}: {}", stderr(&out));
        assert!(!common::is_mounted(&mnt));
    }
    // At the bound it mounts, and a clean unmount reports nothing lost.
    let mut m = Mount::new(&root, &["-o", "flush_timeout=86400,metadata_ttl=86400"]);
    assert!(m.stop().unwrap().success(), "{}", m.log_text());
}

#[test]
fn a_log_file_that_is_no_regular_file_is_refused_without_waiting() {
    let (dir, root) = store(&[]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fifo = dir.path().join("log.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for fg in [true, false] {
        let mut args = vec![root.clone().into_os_string(), mnt.clone().into_os_string(), "--log-file".into(), fifo.clone().into()];
        if fg {
            args.push("-f".into());
        }
        let out = mount_command(args);
        assert!(!out.status.success(), "mounted logging to a FIFO");
        assert!(stderr(&out).contains("is a FIFO, not a regular file"), "{}", stderr(&out));
        assert!(!common::is_mounted(&mnt));
    }
}

#[test]
fn element_sizes_past_the_bound_show_an_error_and_the_mount_lives() {
    let typed = |name: &str, bytes: u64| format!(r#"{{"name": "{name}", "configuration": {{"length_bytes": {bytes}}}}}"#);
    let doc = |data_type: String| array_doc("[4]", "[1]", "DT", BYTES).replace("\"DT\"", &data_type);
    let cases = [
        ("nul", doc(typed("null_terminated_bytes", 1 << 40))),
        ("raw", doc(typed("raw_bytes", 1 << 40))),
        ("utf32", doc(typed("fixed_length_utf32", 1 << 40))),
        ("bits", doc("\"r8796093022208\"".into())),
        ("ok", array_doc("[4]", "[1]", "uint8", BYTES)),
    ];
    let nodes: Vec<(&str, String)> = cases.iter().map(|(p, d)| (*p, d.clone())).collect();
    let (_dir, root) = store(&nodes);
    // A v2 array of the same kind.
    std::fs::create_dir(root.join("v2")).unwrap();
    std::fs::write(
        root.join("v2/.zarray"),
        r#"{"zarr_format": 2, "shape": [4], "chunks": [1], "dtype": "|S1099511627776", "compressor": null, "fill_value": null, "filters": null, "order": "C"}"#,
    )
    .unwrap();
    let info = within(Duration::from_secs(30), "zarrfs info", {
        let root = root.clone();
        move || Command::new(bin()).arg("info").arg(&root).output().unwrap()
    });
    assert!(info.status.code().is_some(), "zarrfs info was killed: {info:?}");
    assert!(String::from_utf8_lossy(&info.stdout).contains("a data type may take"), "{}", String::from_utf8_lossy(&info.stdout));
    let m = Mount::new(&root, &[]);
    let top = m.mountpoint.clone();
    let listed = within(Duration::from_secs(30), "ls -lR", move || Command::new("ls").arg("-lR").arg(&top).output().unwrap());
    assert!(listed.status.success(), "{listed:?}");
    for path in ["nul", "raw", "utf32", "bits", "v2"] {
        let why = std::fs::read_to_string(m.path(&format!("{path}/error"))).unwrap_or_else(|e| panic!("{path}/error: {e}"));
        assert!(why.contains("a data type may take"), "{path}: {why}");
        assert!(!Path::new(&m.path(&format!("{path}/data"))).exists(), "{path}");
    }
    assert_eq!(std::fs::read(m.path("ok/data")).unwrap(), vec![0u8; 4]);
}

#[test]
fn a_control_directory_another_user_made_fails_fast_naming_its_owner() {
    if !root() {
        return;
    }
    // uid 65533 has made uid 65534's control directory first (a tmpfs of its own in the
    // namespace, so the machine's /tmp is left alone).
    let user = common::probe::UserMount::new();
    let out = user.run(
        r#"
        trap 'umount -l {mnt} 2>/dev/null' EXIT
        mkdir -p /tmp/zarrfs-65534 && mount -t tmpfs -o uid=65533,gid=65533,mode=777 tmpfs /tmp/zarrfs-65534
        touch {dir}/daemon.log {dir}/unmount.err && chown 65534 {dir}/daemon.log {dir}/unmount.err
        as_user {exe} mount {store} {mnt} --log-file {dir}/daemon.log || exit 1
        mounted || { echo NOT-MOUNTED; exit 1; }
        start=$(date +%s)
        as_user timeout 100 {exe} unmount {mnt} 2>{dir}/unmount.err
        echo "UNMOUNT $? $(( $(date +%s) - start ))"
        mounted && echo STILL-MOUNTED
        "#,
        Duration::from_secs(120),
    );
    let dir = &user.dir;
    let said = String::from_utf8_lossy(&out.stdout);
    let unmount_err = std::fs::read_to_string(dir.path().join("unmount.err")).unwrap_or_default();
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();
    let line = said.lines().find(|l| l.starts_with("UNMOUNT")).unwrap_or_else(|| panic!("{said} {}", String::from_utf8_lossy(&out.stderr)));
    let fields: Vec<u64> = line.split(' ').skip(1).map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields[0], 0, "unmount failed: {unmount_err}");
    assert!(fields[1] < 20, "unmount took {} s", fields[1]);
    assert!(!said.contains("STILL-MOUNTED"), "{said}");
    assert!(unmount_err.contains("uid 65533"), "the squatter is not named: {unmount_err}");
    assert!(log.contains("uid 65533"), "the daemon does not say why it has no control socket: {log}");
}

#[test]
fn a_prepend_that_is_not_stored_leaves_the_key_encoding_as_it_was() {
    let (_dir, root) = store(&[("a", array_doc("[4, 4]", "[2, 4]", "uint8", BYTES))]);
    let document = root.join("a/zarr.json");
    let before = std::fs::read(&document).unwrap();
    let m = Mount::new(&root, &["-o", "adopt_offset"]);
    // Opened and closed with nothing written; then a refused prepend (half a row).
    drop(std::fs::OpenOptions::new().write(true).open(m.path("a/prepend")).unwrap());
    let refused = common::write_and_close(&m.path("a/prepend"), std::fs::OpenOptions::new().write(true), &[1, 2]);
    assert!(refused.is_err(), "half a row was prepended");
    assert_eq!(std::fs::read(&document).unwrap(), before, "the array was switched to offset keys with nothing prepended");
    // A prepend that is stored switches it, in the same document write.
    common::write_and_close(&m.path("a/prepend"), std::fs::OpenOptions::new().write(true), &[7; 8]).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&document).unwrap()).unwrap();
    assert_eq!(doc["chunk_key_encoding"]["name"], "offset");
    assert_eq!(doc["shape"], serde_json::json!([6, 4]));
}

#[test]
fn names_from_the_store_are_escaped_wherever_they_are_printed() {
    // A name that would retitle the terminal and forge a line of its own.
    let evil = "e\u{1b}]0;owned\u{7}\nFAKE zarrfs: all stored\u{202e}";
    let (dir, root) = store(&[(evil, array_doc("[4]", "[4]", "uint8", common::probe::ZSTD)), ("bad\nname", "{".into())]);
    std::fs::create_dir_all(root.join(evil).join("c")).unwrap();
    std::fs::write(root.join(evil).join("c/0"), b"not zstd at all").unwrap();
    let clean = |what: &str, text: &str| {
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'), "{what} carries a raw escape: {text:?}");
        assert!(!text.lines().any(|l| l.starts_with("FAKE") || l.starts_with("name")), "{what} carries a forged line: {text:?}");
    };
    let info = Command::new(bin()).arg("info").arg(&root).output().unwrap();
    let shown = String::from_utf8_lossy(&info.stdout);
    assert!(shown.contains("\\u{1b}"), "{shown}");
    clean("zarrfs info", &shown);
    clean("zarrfs info's errors", &stderr(&info));
    let log = dir.path().join("daemon.log");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _unmount = common::UnmountOnDrop(mnt.clone());
    let out = mount_command(vec![root.clone().into(), mnt.clone().into(), "--log-file".into(), log.clone().into()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read(mnt.join(evil).join("data")).is_err(), "a corrupt chunk was read");
    let errors = std::fs::read_to_string(mnt.join(".zarrfs/errors")).unwrap();
    assert!(errors.contains("\\u{1b}"), "the failure is not reported: {errors}");
    clean(".zarrfs/errors", &errors);
    let status = Command::new(bin()).arg("status").arg(&mnt).output().unwrap();
    clean("zarrfs status", &String::from_utf8_lossy(&status.stdout));
    let unmounted = Command::new(bin()).arg("unmount").arg(&mnt).output().unwrap();
    assert!(unmounted.status.success(), "{}", stderr(&unmounted));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("\\u{1b}"), "the failure is not logged: {logged}");
    clean("the log", &logged);
}

/// An OME-NGFF 0.5 image group of two levels, `0` and `second`.
fn ome_group(second: &str) -> serde_json::Value {
    serde_json::json!({"zarr_format": 3, "node_type": "group", "attributes": {"ome": {"version": "0.5", "multiscales": [{
        "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]},
                     {"path": second, "coordinateTransformations": [{"type": "scale", "scale": [2, 2]}]}]}]}}})
}

#[test]
fn a_nul_in_an_image_dataset_path_fails_that_view_only() {
    let level = array_doc("[4, 4]", "[4, 4]", "uint8", BYTES);
    let (_dir, root) = store(&[("img/0", level.clone()), ("img/1", level)]);
    std::fs::write(root.join("img/zarr.json"), ome_group("1\0x").to_string()).unwrap();
    let m = Mount::new(&root, &[]);
    let names: Vec<String> = std::fs::read_dir(m.path("img")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.contains(&"0".to_string()) && names.contains(&"1".to_string()), "{names:?}");
    assert!(!names.contains(&"image.ome.tif".to_string()), "{names:?}");
    assert_eq!(std::fs::read(m.path("img/0/data")).unwrap(), [0u8; 16]);
    // The same image with a good path shows its view.
    std::fs::write(root.join("img/zarr.json"), ome_group("1").to_string()).unwrap();
    drop(m);
    let m = Mount::new(&root, &[]);
    assert!(m.path("img/image.ome.tif").exists());
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn rewrites_keep_modes_and_archives_are_no_more_readable_than_their_store() {
    let as_root = root();
    let (dir, root) = store(&[("a", array_doc("[8]", "[4]", "uint8", BYTES))]);
    std::fs::create_dir(root.join("a/c")).unwrap();
    std::fs::write(root.join("a/c/0"), [1u8; 4]).unwrap();
    for key in ["a/c/0", "a/zarr.json"] {
        std::fs::set_permissions(root.join(key), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    if as_root {
        // A user's chunk rewritten by a daemon run as root stays the user's.
        std::os::unix::fs::chown(root.join("a/c/0"), Some(65534), Some(65534)).unwrap();
    }
    let m = Mount::new(&root, &[]);
    let f = std::fs::OpenOptions::new().write(true).open(m.path("a/data")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[9, 9], 1).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // The document rewritten through the mount: a new attribute.
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path("a/zarr.json")).unwrap()).unwrap();
    doc["attributes"] = serde_json::json!({"k": 1});
    std::fs::write(m.path("a/zarr.json"), doc.to_string()).unwrap();
    drop(m);
    assert_eq!(std::fs::read(root.join("a/c/0")).unwrap(), [1, 9, 9, 1], "the write was stored");
    assert!(std::fs::read_to_string(root.join("a/zarr.json")).unwrap().contains("\"k\""));
    for key in ["a/c/0", "a/zarr.json"] {
        assert_eq!(mode_of(&root.join(key)), 0o600, "{key} was widened by a rewrite");
    }
    if as_root {
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(root.join("a/c/0")).unwrap()),
            65534,
            "a user's chunk became root's"
        );
    }
    // A private store packs into a private archive; an open one into an archive the umask allows.
    for (store_mode, archive_mode) in [(0o700, 0o600), (0o755, 0o644)] {
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(store_mode)).unwrap();
        let out = dir.path().join(format!("packed-{store_mode:o}.zip"));
        let packed = Command::new("sh")
            .arg("-c")
            .arg(format!("umask 022; exec {} pack {} {}", bin(), root.display(), out.display()))
            .output()
            .unwrap();
        assert!(packed.status.success(), "{}", stderr(&packed));
        assert_eq!(mode_of(&out), archive_mode, "an archive of a {store_mode:o} store");
    }
}

#[test]
fn pack_says_what_it_leaves_out() {
    use std::os::unix::ffi::OsStrExt;
    let (dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let odd = root.join(std::ffi::OsStr::from_bytes(b"odd\xff"));
    std::fs::create_dir(&odd).unwrap();
    std::fs::write(odd.join("zarr.json"), array_doc("[4]", "[4]", "uint8", BYTES)).unwrap();
    let out = dir.path().join("packed.zip");
    let packed = Command::new(bin()).arg("pack").arg(&root).arg(&out).output().unwrap();
    assert!(packed.status.success(), "{}", stderr(&packed));
    assert!(
        stderr(&packed).contains("left out 1 name(s) that are not UTF-8") && stderr(&packed).contains("odd\\xff"),
        "{}",
        stderr(&packed)
    );
}

#[test]
fn the_daemons_reports_have_true_sizes_and_a_spool_inside_the_mount_is_refused() {
    let (dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let m = Mount::new(&root, &[]);
    let _ = std::fs::read(m.path("a/nonexistent"));
    for _ in 0..5 {
        for report in [".zarrfs/stats", ".zarrfs/errors"] {
            let said = std::fs::metadata(m.path(report)).unwrap().len();
            let held = std::fs::read(m.path(report)).unwrap().len() as u64;
            assert_eq!(said, held, "{report}: stat says {said} bytes, a read gives {held}");
        }
    }
    let tar =
        Command::new("tar").arg("-cf").arg(dir.path().join("reports.tar")).arg("-C").arg(&m.mountpoint).arg(".zarrfs").output().unwrap();
    assert!(tar.status.success() && tar.stderr.is_empty(), "tar of the reports: {}", stderr(&tar));
    // A spool the mount itself would serve.
    let mnt = dir.path().join("mnt2");
    std::fs::create_dir(&mnt).unwrap();
    let _unmount = common::UnmountOnDrop(mnt.clone());
    let out = mount_command(vec![root.clone().into(), mnt.clone().into(), "--spool-dir".into(), mnt.join("spool").into()]);
    assert!(!out.status.success() && stderr(&out).contains("inside the mount point"), "{}", stderr(&out));
    assert!(!common::is_mounted(&mnt));
}

/// Mode `mode` on `path`.
fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_shared_mount_shows_no_one_what_the_store_keeps_from_them() {
    if !root() {
        return;
    }
    let doc = || array_doc("[4]", "[4]", "uint8", BYTES);
    // Named dimensions: a group of such arrays is a dataset (`dataset.nc`).
    let named = || doc().replace(r#""fill_value""#, r#""dimension_names": ["x"], "fill_value""#);
    let (_dir, root) =
        store(&[("g/open", named()), ("g/closed", named()), ("moded", doc()), ("linked", doc()), ("secret", doc()), ("fine", doc())]);
    std::fs::write(root.join("g/zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    for array in ["g/open", "g/closed", "moded", "secret", "fine"] {
        std::fs::create_dir(root.join(array).join("c")).unwrap();
        std::fs::write(root.join(array).join("c/0"), b"PRIV").unwrap();
    }
    // A member of a group nobody else may enter; a chunk kept private under a readable
    // document; a chunk planted as a link to a private array's (readable) chunk.
    chmod(&root.join("g/closed"), 0o700);
    chmod(&root.join("moded/c/0"), 0o600);
    chmod(&root.join("secret"), 0o700);
    std::fs::create_dir(root.join("linked/c")).unwrap();
    std::os::unix::fs::symlink("../../secret/c/0", root.join("linked/c/0")).unwrap();
    // A v2 array whose attributes only its owner may read.
    std::fs::create_dir(root.join("v2")).unwrap();
    std::fs::write(root.join("v2/.zarray"), r#"{"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "|u1", "compressor": null, "fill_value": 0, "filters": null, "order": "C"}"#).unwrap();
    std::fs::write(root.join("v2/.zattrs"), r#"{"secret": "x"}"#).unwrap();
    chmod(&root.join("v2/.zattrs"), 0o600);
    let m = Mount::new(&root, &["-o", "allow_other"]);
    chmod(m.dir.path(), 0o755);
    let read_as_nobody = |what: &str| common::probe::as_nobody(&format!("cat {}", m.path(what).display()));
    let fine = read_as_nobody("fine/data");
    assert!(fine.status.success() && fine.stdout == b"PRIV", "{fine:?}");
    assert!(read_as_nobody("g/open/data").status.success());
    for what in ["g/dataset.nc", "g/closed/data", "moded/data", "moded/data.npy", "linked/data", "v2/data", "v2/.zattrs"] {
        let out = read_as_nobody(what);
        assert!(!out.status.success(), "another user read {what}: {}", String::from_utf8_lossy(&out.stdout));
        assert!(!String::from_utf8_lossy(&out.stdout).contains("PRIV"), "{what} leaked");
    }
    // The owner reads what the group view is made of, and the view; the private chunk under a
    // public array is served to no one, the owner told why in the log.
    assert_eq!(std::fs::read(m.path("g/closed/data")).unwrap(), b"PRIV");
    let view = std::fs::read(m.path("g/dataset.nc"));
    assert!(view.is_ok(), "{view:?} {}", m.log_text());
    assert!(std::fs::read(m.path("moded/data")).is_err());
    assert!(m.log_text().contains("readable by fewer users than its array"), "{}", m.log_text());
    drop(m);
    // A store inside a directory only its owner may enter is served to no one else.
    let home = tempfile::tempdir().unwrap();
    chmod(home.path(), 0o700);
    let inside = home.path().join("s.zarr");
    assert!(Command::new("cp").arg("-a").arg(&root).arg(&inside).status().unwrap().success());
    let m = Mount::new(&inside, &["-o", "allow_other"]);
    chmod(m.dir.path(), 0o755);
    let out = common::probe::as_nobody(&format!("od -An -c {}", m.path("fine/data").display()));
    assert!(!out.status.success(), "a store in a private directory was read by another user: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(std::fs::read(m.path("fine/data")).unwrap(), b"PRIV", "its owner reads it");
}

#[test]
fn normalize_refuses_a_store_a_read_write_mount_serves() {
    let (_dir, root) = store(&[("a", array_doc("[4]", "[2]", "uint8", BYTES))]);
    let run = |args: &[&str]| Command::new(bin()).args(args).arg(&root).arg("a").output().unwrap();
    assert!(run(&["adopt"]).status.success());
    let before = std::fs::read(root.join("a/zarr.json")).unwrap();
    let m = Mount::new(&root, &[]);
    std::fs::write(m.path("a/data"), [1, 2, 3, 4]).unwrap();
    let refused = run(&["normalize"]);
    assert!(!refused.status.success(), "normalize ran under a read-write mount");
    assert!(stderr(&refused).contains("a read-write zarrfs mount serves it"), "{}", stderr(&refused));
    assert_eq!(std::fs::read(root.join("a/zarr.json")).unwrap(), before, "the document was rewritten");
    drop(m);
    // A read-only mount writes nothing where keys were: normalize runs beside it.
    let m = Mount::new(&root, &["-o", "ro"]);
    let done = run(&["normalize"]);
    assert!(done.status.success(), "{}", stderr(&done));
    drop(m);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(root.join("a/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["chunk_key_encoding"]["name"], "default");
    assert_eq!(std::fs::read(root.join("a/c/0")).unwrap(), [1, 2]);
}

#[test]
fn a_server_that_ignores_ranges_serves_each_value_once_for_many_ranges() {
    use std::io::{BufRead, Write};
    // Four values of 64 KiB, each a byte of its own; every GET answered whole (200), as
    // `python -m http.server` does; the GETs of each value counted.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let gets = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<String, u32>::new()));
    let counted = gets.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counted = counted.clone();
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut request = String::new();
                    if reader.read_line(&mut request).map_or(true, |n| n == 0) {
                        return;
                    }
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        line.clear();
                    }
                    let mut parts = request.split_whitespace();
                    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or("").to_string());
                    let Some(k) = path.strip_prefix("/s/v").and_then(|k| k.parse::<u8>().ok()).filter(|k| *k < 4) else {
                        let _ = out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                        continue;
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: 65536\r\nETag: \"v{k}\"\r\nLast-Modified: Sun, 06 Dec 2026 05:00:00 GMT\r\n\r\n"
                    );
                    let _ = out.write_all(head.as_bytes());
                    if method == "GET" {
                        *counted.lock().unwrap().entry(path).or_default() += 1;
                        let _ = out.write_all(&[k; 65536]);
                    }
                }
            });
        }
    });
    let location = zarrfs::store::Location::parse(std::ffi::OsStr::new(&format!("http://127.0.0.1:{port}/s"))).unwrap();
    let store = location.open(&zarrfs::store::RemoteOptions::default()).unwrap();
    // Ranges of the four values in turn, as the inner chunks of four shards are read.
    for round in 0..4u64 {
        for k in 0..4u8 {
            let range = zarrfs::store::ByteRange::Range { start: round * 1000, len: 100 };
            let got = store.get_range(&format!("v{k}"), range).unwrap().unwrap();
            assert_eq!(got, vec![k; 100]);
        }
    }
    let gets = gets.lock().unwrap().clone();
    // The first ranged GET, answered whole, teaches that the server ignores ranges; then each
    // value is fetched once.
    let total: u32 = gets.values().sum();
    assert!(gets.len() == 4 && total <= 5, "GETs per value: {gets:?}");
}

#[test]
fn a_server_that_trickles_fails_a_read_in_bounded_time() {
    use std::io::{BufRead, Write};
    // Every answer: 4 KiB promised, one byte a second.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let mut out = stream;
                let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\nContent-Type: application/octet-stream\r\n\r\n");
                for _ in 0..4096 {
                    if out.write_all(b"x").is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
        }
    });
    let location = zarrfs::store::Location::parse(std::ffi::OsStr::new(&format!("http://127.0.0.1:{port}/s"))).unwrap();
    let store = location.open(&zarrfs::store::RemoteOptions::default()).unwrap();
    let store_again = store.clone();
    let started = std::time::Instant::now();
    let got =
        within(Duration::from_secs(100), "a read from a server that trickles", move || store.get("c/0", 1 << 20).map(|v| v.is_some()));
    let took = started.elapsed();
    let err = got.expect_err("4 KiB at a byte a second was read");
    assert!(err.to_string().contains("whole time is bounded"), "the error does not say why: {err}");
    assert!(took < Duration::from_secs(60), "the read failed only after {took:?}");
    // The kernel retries a failed read once: the retry fails at once, not after a second bound.
    let started = std::time::Instant::now();
    let again = store_again.get("c/0", 1 << 20).map(|v| v.is_some());
    let err = again.expect_err("read on the retry");
    assert!(err.to_string().contains("not asked again"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "the retry waited {:?}", started.elapsed());
}

#[test]
fn the_start_up_repair_of_consolidated_metadata_is_bounded_and_writes_nothing_it_would_refuse() {
    // A stale consolidation (it lists nothing) over arrays whose attributes are long lists:
    // 24 MiB of documents in all.
    let list = format!("[{}1]", "1,".repeat(4 << 20));
    let nodes: Vec<(String, String)> = (0..3)
        .map(|i| {
            (
                format!("a{i}"),
                array_doc("[4]", "[4]", "uint8", BYTES)
                    .replace(r#""fill_value""#, &format!(r#""attributes": {{"long": {list}}}, "fill_value""#)),
            )
        })
        .collect();
    let nodes: Vec<(&str, String)> = nodes.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    let (_dir, root) = store(&nodes);
    let consolidated = r#"{"zarr_format": 3, "node_type": "group", "attributes": {}, "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {}}}"#;
    std::fs::write(root.join("zarr.json"), consolidated).unwrap();
    let m = Mount::new(&root, &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !m.log_text().contains("consolidated metadata not rebuilt") {
        assert!(std::time::Instant::now() < deadline, "the repair said nothing: {}", m.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let peak = m.peak_rss();
    assert_eq!(std::fs::read_to_string(m.path("a0/data")).map(|d| d.len()).unwrap(), 4, "the mount serves");
    drop(m);
    assert_eq!(std::fs::read_to_string(root.join("zarr.json")).unwrap(), consolidated, "the root document was rewritten");
    eprintln!("peak resident memory of the mount: {} MiB", peak >> 20);
    assert!(peak < 1 << 30, "the repair took {} MiB", peak >> 20);
}

#[test]
fn an_arrays_long_attributes_are_held_as_their_text() {
    // 24 MiB of attributes: parsed whole they took some 35 times that, held while mounted.
    let list = format!("[{}1]", "1,".repeat(12 << 20));
    let doc = array_doc("[4]", "[4]", "uint8", BYTES)
        .replace(r#""fill_value""#, &format!(r#""attributes": {{"units": "K", "long": {list}}}, "fill_value""#));
    let (_dir, root) = store(&[("a", doc)]);
    let m = Mount::new(&root, &[]);
    assert_eq!(std::fs::read(m.path("a/data")).unwrap(), [0; 4]);
    assert!(std::fs::read_dir(m.path("a")).unwrap().count() > 1, "the views are made");
    assert_eq!(std::fs::read(m.path("a/zarr.json")).unwrap(), std::fs::read(root.join("a/zarr.json")).unwrap());
    let held = m.rss();
    // A growth stores the document again, the attributes as they were.
    let mut f = std::fs::OpenOptions::new().append(true).open(m.path("a/data")).unwrap();
    std::io::Write::write_all(&mut f, &[7; 4]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let peak = m.peak_rss();
    drop(m);
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(root.join("a/zarr.json")).unwrap()).unwrap();
    assert_eq!(stored["shape"], serde_json::json!([8]));
    assert_eq!(stored["attributes"]["units"], "K");
    assert_eq!(stored["attributes"]["long"].as_array().map(Vec::len), Some((12 << 20) + 1));
    eprintln!("resident memory of the mount: {} MiB held, {} MiB at most", held >> 20, peak >> 20);
    assert!(held < 160 << 20, "the mount holds {} MiB", held >> 20);
    assert!(peak < 400 << 20, "the mount took {} MiB", peak >> 20);
}

#[test]
fn the_attributes_held_across_arrays_stay_within_their_budget() {
    // 12 arrays of 4 MiB of attributes each; a 64 MiB cache bounds them to 16 MiB.
    let list = format!("[{}1]", "1,".repeat(2 << 20));
    let doc =
        array_doc("[4]", "[4]", "uint8", BYTES).replace(r#""fill_value""#, &format!(r#""attributes": {{"long": {list}}}, "fill_value""#));
    let nodes: Vec<(String, String)> = (0..12).map(|i| (format!("a{i}"), doc.clone())).collect();
    let nodes: Vec<(&str, String)> = nodes.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    let (_dir, root) = store(&nodes);
    let m = Mount::new(&root, &["-o", "cache_size=64M"]);
    let held = || {
        let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path(".zarrfs/stats")).unwrap()).unwrap();
        stats["attribute_bytes"].as_u64().unwrap()
    };
    // A writer keeps its array whatever the others take.
    let writer = std::fs::OpenOptions::new().write(true).open(m.path("a0/data")).unwrap();
    std::os::unix::fs::FileExt::write_at(&writer, &[5, 6], 1).unwrap();
    for i in 1..12 {
        assert_eq!(std::fs::read(m.path(&format!("a{i}/data"))).unwrap(), [0; 4]);
    }
    let after_walk = held();
    eprintln!("attribute text held after the walk: {} MiB", after_walk >> 20);
    // The budget, the loads between two counts (a quarter of it) and the one being loaded.
    assert!(after_walk <= (16 + 4 + 5) << 20, "{} MiB held", after_walk >> 20);
    assert!(after_walk >= 4 << 20, "the writer's array is held");
    writer.sync_all().unwrap();
    drop(writer);
    // What was forgotten is read again, as it is stored.
    for i in (0..12).rev() {
        let want: &[u8] = if i == 0 { &[0, 5, 6, 0] } else { &[0; 4] };
        assert_eq!(std::fs::read(m.path(&format!("a{i}/data"))).unwrap(), want);
        assert_eq!(std::fs::read(m.path(&format!("a{i}/zarr.json"))).unwrap(), doc.as_bytes());
    }
    drop(m);
    assert_eq!(std::fs::read(root.join("a0/c/0")).unwrap(), [0, 5, 6, 0]);
}

#[test]
fn a_datasets_header_is_bounded_whatever_its_attributes_hold() {
    // Members whose attributes hold long text and long lists (kept in Zarr, far past what any
    // netCDF tool shows): left out of the header, said so; the rest of the view is served.
    let long_text = "x".repeat(2 << 20);
    let long_list = format!("[{}1]", "1,".repeat(200_000));
    let member = |attributes: &str| {
        array_doc("[4]", "[4]", "uint8", BYTES)
            .replace(r#""fill_value""#, &format!(r#""dimension_names": ["x"], "attributes": {attributes}, "fill_value""#))
    };
    let nodes: Vec<(String, String)> = (0..8)
        .map(|i| (format!("g/v{i}"), member(&format!(r#"{{"units": "K", "history": "{long_text}", "long": {long_list}}}"#))))
        .collect();
    let nodes: Vec<(&str, String)> = nodes.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    let (_dir, root) = store(&nodes);
    std::fs::write(root.join("g/zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let info = Command::new(bin()).arg("info").arg(&root).arg("g").output().unwrap();
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("an attribute of the header may take"),
        "{}",
        String::from_utf8_lossy(&info.stdout)
    );
    let m = Mount::new(&root, &[]);
    let nc = std::fs::read(m.path("g/dataset.nc")).unwrap();
    assert!(nc.len() < 1 << 20, "a header of {} bytes", nc.len());
    assert!(nc.starts_with(b"CDF"));
    assert!(nc.windows(b"units".len()).any(|w| w == b"units"), "the short attributes stay");
    // Many members whose attributes are each short enough, and together too long.
    drop(m);
    let medium = "y".repeat(900 << 10);
    let nodes: Vec<(String, String)> = (0..20).map(|i| (format!("h/v{i}"), member(&format!(r#"{{"history": "{medium}"}}"#)))).collect();
    let nodes: Vec<(&str, String)> = nodes.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    let (_dir2, root2) = store(&nodes);
    std::fs::write(root2.join("h/zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let m = Mount::new(&root2, &[]);
    assert!(!m.path("h/dataset.nc").exists(), "a header of 18 MiB of attributes was made");
    assert!(std::fs::read(m.path("h/v0/data")).is_ok());
    let info = Command::new(bin()).arg("info").arg(&root2).arg("h").output().unwrap();
    assert!(String::from_utf8_lossy(&info.stdout).contains("header of more than 16 MiB"), "{}", String::from_utf8_lossy(&info.stdout));
}

#[test]
fn an_image_view_admits_only_who_may_read_every_level() {
    if !root() {
        return;
    }
    let level = array_doc("[4, 4]", "[4, 4]", "uint8", BYTES);
    let (_dir, root) = store(&[("img/0", level.clone()), ("img/1", level)]);
    std::fs::write(root.join("img/zarr.json"), ome_group("1").to_string()).unwrap();
    chmod(&root.join("img/1/zarr.json"), 0o600);
    let m = Mount::new(&root, &["-o", "allow_other"]);
    chmod(m.dir.path(), 0o755);
    assert!(common::probe::as_nobody(&format!("cat {} > /dev/null", m.path("img/0/data").display())).status.success());
    let out = common::probe::as_nobody(&format!("cat {} > /dev/null", m.path("img/image.ome.tif").display()));
    assert!(!out.status.success(), "another user read an image one of whose levels is kept from them");
    assert!(std::fs::read(m.path("img/image.ome.tif")).is_ok(), "its owner reads it");
}
