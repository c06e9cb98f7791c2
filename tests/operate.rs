//! As an operator meets the tool: common mistakes get a message that names them (an unknown URL
//! scheme, a mount point that is not empty, a prepend on an array that needs adopting first), and
//! `df` showing what a local store has.

mod common;

use std::process::Command;

use common::probe::{BYTES, array_doc, store};
use common::{Mount, bin};

fn mount_err(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(bin()).arg("mount").args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} mounted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn unknown_url_schemes_and_one_slash_urls_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for (source, why) in [
        ("s4://bucket/x.zarr", "unknown URL scheme s4:"),
        ("ftp://host/x.zarr", "unknown URL scheme ftp:"),
        ("s3:/bucket/x.zarr", "a URL needs two slashes after its scheme: s3://bucket/x.zarr"),
    ] {
        let err = mount_err(&[source.as_ref(), mnt.as_os_str()]);
        assert!(err.contains(why), "{source}: {err}");
        assert!(!err.contains("does not exist"), "{source}: {err}");
    }
}

#[test]
fn a_mount_point_that_is_not_empty_is_refused_unless_asked() {
    let (dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(mnt.join("notes.txt"), "mine").unwrap();
    let err = mount_err(&[root.as_os_str(), mnt.as_os_str()]);
    assert!(err.contains("is not empty") && err.contains("-o nonempty"), "{err}");
    assert!(!common::is_mounted(&mnt));
    let _unmount = common::UnmountOnDrop(mnt.clone());
    let out = Command::new(bin())
        .arg("mount")
        .arg(&root)
        .arg(&mnt)
        .args(["-o", "nonempty", "--log-file"])
        .arg(dir.path().join("log"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(mnt.join("a/data").exists());
    assert!(Command::new(bin()).arg("unmount").arg(&mnt).status().unwrap().success());
    assert_eq!(std::fs::read_to_string(mnt.join("notes.txt")).unwrap(), "mine", "the files under it are back");
}

#[test]
fn a_refused_prepend_says_what_to_do_in_the_log_and_the_errors_file() {
    let (_dir, root) = store(&[("a", array_doc("[4, 4]", "[2, 4]", "uint8", BYTES))]);
    let m = Mount::new(&root, &[]);
    let err = std::fs::OpenOptions::new().write(true).open(m.path("a/prepend")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP));
    let errors = std::fs::read_to_string(m.path(".zarrfs/errors")).unwrap();
    assert!(errors.contains("/a cannot be prepended to") && errors.contains("zarrfs adopt"), "{errors}");
    assert!(m.log_text().contains("zarrfs adopt"), "{}", m.log_text());
}

#[test]
fn df_shows_the_stores_file_system() {
    let (_dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let m = Mount::new(&root, &[]);
    let df = |path: &std::path::Path| {
        let out = Command::new("df").args(["-B1", "--output=size,avail"]).arg(path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let fields: Vec<u64> = text.lines().nth(1).unwrap().split_whitespace().map(|f| f.parse().unwrap()).collect();
        (fields[0], fields[1])
    };
    let (store_size, store_avail) = df(&root);
    let (mount_size, mount_avail) = df(&m.mountpoint);
    assert!(mount_size > 0, "df shows a mount of size 0");
    assert_eq!(mount_size, store_size, "the mount's size is not its store's file system's");
    // Free space moves with whatever else writes there: close, not equal.
    assert!(mount_avail.abs_diff(store_avail) < 64 << 20, "{mount_avail} free against {store_avail}");
}

#[test]
fn a_mount_shows_as_zarrfs_with_its_store_and_status_lists_the_users_mounts() {
    let (_dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    // Mounted by a relative path, shown by its absolute one.
    let relative = root.strip_prefix(root.parent().unwrap().parent().unwrap()).unwrap();
    let cwd = root.parent().unwrap().parent().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let out = Command::new(bin()).current_dir(cwd).arg("mount").arg(relative).arg(mnt.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _unmount = common::probe::OnDrop({
        let mnt = mnt.path().to_path_buf();
        move || {
            let _ = Command::new(bin()).arg("unmount").arg(&mnt).status();
        }
    });
    let found = Command::new("findmnt").args(["-n", "-o", "FSTYPE,SOURCE", "--mountpoint"]).arg(mnt.path()).output().unwrap();
    let found = String::from_utf8_lossy(&found.stdout);
    assert_eq!(found.split_whitespace().collect::<Vec<_>>(), ["fuse.zarrfs", root.to_str().unwrap()], "{found}");
    for args in [&["status"][..], &["list"][..]] {
        let out = Command::new(bin()).args(args).output().unwrap();
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {listed}");
        let line = listed.lines().find(|l| l.starts_with(mnt.path().to_str().unwrap())).unwrap_or_else(|| panic!("{args:?}: {listed}"));
        assert!(line.contains(root.to_str().unwrap()) && line.contains("0 B held"), "{line}");
    }
}
