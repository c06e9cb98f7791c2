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
        (vec![dir.path().join("nope").into(), mnt.clone().into()], "not a directory"),
        (vec![dir.path().into(), mnt.clone().into()], "not a Zarr store"),
        (vec![fixtures().join("v3.zarr").into(), file.clone().into()], "mount point"),
        (vec![fixtures().join("v3.zarr").into(), mnt.clone().into(), "-o".into(), "frobnicate".into()], "unknown mount option"),
        (vec![fixtures().join("v3.zarr").into(), mnt.clone().into(), "-o".into(), "cache_size=big".into()], "size"),
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
    assert!(text.contains("/sharded/end  array v3  float32 [10,9]  chunks regular [4, 6]"), "{text}");
    assert!(text.contains("sharding_indexed"), "{text}");
    let out = Command::new(bin()).args(["info", "--json"]).arg(fixtures().join("damaged.zarr")).output().unwrap();
    let nodes: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let problem =
        |p: &str| nodes.as_array().unwrap().iter().find(|n| n["path"] == p).and_then(|n| n["problem"].as_str()).map(str::to_string);
    assert!(problem("/unknown_codec").unwrap().contains("lzma42"));
    assert!(problem("/good").is_none());
    let out = Command::new(bin()).args(["info"]).arg(fixtures().join("v2.zarr")).arg("sub").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("/sub  group\n/sub/nan_fill  array v2  float32 [6]"), "{text}");
}
