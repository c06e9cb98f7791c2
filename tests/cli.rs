//! The command line: background mounts, their errors, unmount, info.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{bin, fixtures, is_mounted};

fn wait_unmounted(path: &std::path::Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_mounted(path) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn background_mount_is_live_when_the_command_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(bin()).arg("mount").arg(fixtures().join("v3.zarr")).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let live = is_mounted(&mnt);
    let read = std::fs::read(mnt.join("shapes/d1/data"));
    let un = Command::new(bin()).arg("unmount").arg(&mnt).output().unwrap();
    if !wait_unmounted(&mnt) {
        let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    }
    assert!(live, "mounted when `zarrfs mount` returned");
    assert_eq!(read.unwrap().len(), 17);
    assert!(un.status.success(), "{}", String::from_utf8_lossy(&un.stderr));
}

#[test]
fn fstab_form_with_options_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // As mount.fuse3 runs it: `zarrfs SOURCE MOUNTPOINT -o OPTS`.
    let out = Command::new(bin())
        .arg(fixtures().join("v2.zarr"))
        .arg(&mnt)
        .arg("-o")
        .arg("ro,nodev,nosuid,cache_size=64M,_netdev,x-systemd.automount")
        .output()
        .unwrap();
    let ok = out.status.success();
    let write = std::fs::OpenOptions::new().write(true).open(mnt.join("zstd/data"));
    let _ = Command::new(bin()).arg("unmount").arg(&mnt).status();
    if !wait_unmounted(&mnt) {
        let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    }
    assert!(ok, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(write.unwrap_err().raw_os_error(), Some(libc::EROFS));
}

#[test]
fn mount_errors_are_reported_before_returning() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec![dir.path().join("nope").into(), mnt.clone().into()], "does not exist"),
        (vec![file.clone().into(), mnt.clone().into()], "is not a directory"),
        (vec![fixtures().join("v3.zarr").into(), dir.path().join("nomnt").into()], "mount point"),
        (vec![dir.path().into(), mnt.clone().into()], "not a Zarr store"),
        (vec![fixtures().join("v3.zarr").into(), file.clone().into()], "mount point"),
        (vec![fixtures().join("v3.zarr").into(), mnt.clone().into(), "-o".into(), "frobnicate".into()], "unknown mount option"),
        (vec![fixtures().join("v3.zarr").into(), mnt.clone().into(), "-o".into(), "cache_size=big".into()], "option cache_size=big"),
        (
            vec![fixtures().join("v3.zarr").into(), mnt.clone().into(), "-o".into(), "threads".into()],
            "option threads: threads needs a value",
        ),
        (vec![fixtures().join("v3.zarr").into(), mnt.clone().into(), "--cache-size".into(), "lots".into()], "--cache-size"),
    ];
    for (args, msg) in cases {
        let out = Command::new(bin()).arg("mount").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
    assert!(!is_mounted(&mnt));
}

#[test]
fn info_describes_without_reading_chunks() {
    let out = Command::new(bin()).arg("info").arg(fixtures().join("v3.zarr")).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/sharded/end  array (Zarr v3)\n  shape       10 × 9\n  data type   float32"), "{text}");
    assert!(text.contains("  shards      4 × 6 ("), "{text}");
    assert!(text.contains("sharding_indexed("), "{text}");
    // One readable block per array: no line of hundreds of characters.
    let longest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(longest <= 120, "a line of {longest} characters:\n{text}");
    let out = Command::new(bin()).args(["info", "--json"]).arg(fixtures().join("damaged.zarr")).output().unwrap();
    let nodes: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let problem =
        |p: &str| nodes.as_array().unwrap().iter().find(|n| n["path"] == p).and_then(|n| n["problem"].as_str()).map(str::to_string);
    assert!(problem("/unknown_codec").unwrap().contains("lzma42"));
    assert!(problem("/good").is_none());
    let out = Command::new(bin()).args(["info"]).arg(fixtures().join("v2.zarr")).arg("sub").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("/sub  group\n/sub/nan_fill  array (Zarr v2)\n  shape       6\n"), "{text}");
}

#[test]
fn info_answers_which_axis_is_which_and_what_is_stored() {
    let out = Command::new(bin()).args(["info", "--attributes"]).arg(common::demo()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/temp  array (Zarr v3)\n  shape       24 × 16 × 32  (hour, lat, lon)\n"), "{text}");
    assert!(text.contains("  data type   float32, fill value \"NaN\""), "{text}");
    assert!(text.contains("    units: \"degC\""), "{text}");
    assert!(text.contains("/lat  array") && text.contains("  coordinate  of temp"), "{text}");
    let out = Command::new(bin()).args(["info", "--json"]).arg(common::demo()).arg("temp").output().unwrap();
    let nodes: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let temp = &nodes[0];
    assert_eq!(temp["dimension_names"], serde_json::json!(["hour", "lat", "lon"]));
    assert_eq!(temp["data_bytes"], 24 * 16 * 32 * 4);
    // The chunk files of the demo store, counted: the ratio is the data over what is stored.
    let stored: u64 = walk_files(&common::demo().join("temp/c")).iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(temp["stored"]["bytes"], stored);
    assert_eq!(temp["stored"]["objects"], walk_files(&common::demo().join("temp/c")).len());
    assert!(temp["ratio"].as_f64().unwrap() > 1.0);
    assert_eq!(temp["attributes"]["units"], "degC");
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { out.extend(walk_files(&p)) } else { out.push(p) }
    }
    out
}

/// `zarrfs ARGS`: its exit code, stdout and stderr.
fn run(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_command_line_behaves_like_the_tools_users_know() {
    let dir = tempfile::tempdir().unwrap();
    let os = |s: &str| std::ffi::OsString::from(s);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // --version, and the help with defaults and examples.
    let (code, out, _) = run(&[&os("--version")]);
    assert_eq!((code, out.trim()), (Some(0), format!("zarrfs {}", env!("CARGO_PKG_VERSION")).as_str()));
    let (code, out, _) = run(&[&os("mount"), &os("--help")]);
    assert_eq!(code, Some(0));
    for want in [
        "[default: 1G]",
        "[default: 256M]",
        "[default: 8]",
        "[default: 30]",
        "tiff",
        "nifti",
        "Examples:",
        "zarrfs mount weather.zarr /mnt/w",
    ] {
        assert!(out.contains(want), "mount --help lacks {want:?}:\n{out}");
    }
    // `umount` is `unmount`, not a store named "umount".
    let (code, _, err) = run(&[&os("umount"), mnt.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("nothing is mounted there"), "{err}");
    // An unknown verb is clap's error, with a suggestion; a path still means the fstab form.
    let (code, _, err) = run(&[&os("mout"), &os("a"), &os("b")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unrecognized subcommand 'mout'") && err.contains("mount"), "{err}");
    let (code, _, err) = run(&[dir.path().join("missing.zarr").as_os_str(), mnt.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("does not exist"), "{err}");
    // Refusals exit non-zero.
    let (code, _, err) = run(&[&os("info"), fixtures().join("v3.zarr").as_os_str(), &os("no/such/node")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no node at \"no/such/node\""), "{err}");
    let (code, _, err) = run(&[&os("info"), dir.path().join("missing.zarr").as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("does not exist"), "{err}");
    let (code, _, _) = run(&[&os("status"), mnt.as_os_str()]);
    assert_eq!(code, Some(1));
    // Completions and the manual, from the same definitions.
    let (code, out, _) = run(&[&os("completions"), &os("bash")]);
    assert_eq!(code, Some(0));
    assert!(out.contains("_zarrfs()") && out.contains("umount") && out.contains("--cache-size"), "{out}");
    let (code, out, _) = run(&[&os("man")]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with(".ie") || out.contains(".TH zarrfs"), "{}", &out[..out.len().min(300)]);
    // The sections clap has no place for: the environment, the files, fstab examples.
    for want in [".SH ENVIRONMENT", "AWS_ALLOW_HTTP=true", ".SH FILES", "/var/log/zarrfs/", ".SH EXAMPLES", "/etc/fstab line"] {
        assert!(out.contains(want), "the manual lacks {want:?}");
    }
    assert!(out.contains("zarrfs mount \\-\\-metrics\\-addr 9100"), "options are escaped for roff");
    // Every positional argument is described; options a command ignores are not offered.
    for (command, want) in [
        ("info", "The store: a directory"),
        ("adopt", "The array's path inside the store"),
        ("pack", "NAME.ozx"),
        ("unmount", "The zarrfs mount point"),
    ] {
        let (code, out, _) = run(&[&os(command), &os("--help")]);
        assert_eq!(code, Some(0));
        assert!(out.contains(want), "{command} --help lacks {want:?}:\n{out}");
    }
    for command in ["adopt", "log"] {
        let (_, out, _) = run(&[&os(command), &os("--help")]);
        assert!(!out.contains("--virtual-chunks"), "{command} reads no chunk, yet offers --virtual-chunks:\n{out}");
        assert!(!out.contains("--targets"), "{command} reads no chunk, yet offers --targets:\n{out}");
    }
    let pages = dir.path().join("man");
    let (code, _, err) = run(&[&os("man"), pages.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        std::fs::read_to_string(pages.join("zarrfs.1")).unwrap().contains(".SH ENVIRONMENT"),
        "the written zarrfs.1 lacks its sections"
    );
    for page in ["zarrfs.1", "zarrfs-mount.1", "zarrfs-unmount.1", "zarrfs-normalize.1"] {
        assert!(pages.join(page).exists(), "no {page}");
    }
}

#[test]
fn a_broken_pipe_ends_the_output_quietly() {
    // Enough nodes that the output outgrows a pipe's buffer.
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.zarr");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("zarr.json"), br#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    for i in 0..3000 {
        std::fs::create_dir(store.join(format!("g{i}"))).unwrap();
        std::fs::write(store.join(format!("g{i}/zarr.json")), br#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    }
    for args in [vec!["info"], vec!["info", "--json"]] {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("\"$0\" {} \"$1\" | head -c 10 > /dev/null", args.join(" ")))
            .arg(bin())
            .arg(&store)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.is_empty(), "{args:?}: {err}");
        assert!(out.status.success());
    }
}

#[test]
fn prepend_refusals_say_what_to_do() {
    let (_dir, store) = common::copy_store(&fixtures().join("v3.zarr"));
    let rows = store.parent().unwrap().join("rows.raw");
    std::fs::write(&rows, [0u8; 4096]).unwrap();
    let (code, _, err) = run(&[std::ffi::OsStr::new("prepend"), store.as_os_str(), "shapes/d1".as_ref(), rows.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("zarrfs adopt") && err.contains("--adopt-offset"), "{err}");
    let (_dir2, v2) = common::copy_store(&fixtures().join("v2.zarr"));
    let (code, _, err) = run(&[std::ffi::OsStr::new("prepend"), v2.as_os_str(), "zstd".as_ref(), rows.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Zarr v2 array"), "{err}");
    // No timings on a success; what was done, in one line.
    let (code, out, err) = run(&[std::ffi::OsStr::new("adopt"), store.as_os_str(), "shapes/d1".as_ref()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("offset"), "{out}");
}
