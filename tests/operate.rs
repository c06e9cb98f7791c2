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

/// The samples of a scrape, `name{labels}` to value; every line is a comment or a sample.
fn scrape(addr: &str) -> std::collections::HashMap<String, f64> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: zarrfs\r\n\r\n").unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/plain; version=0.0.4"), "{head}");
    let mut typed = std::collections::HashSet::new();
    body.lines()
        .filter_map(|line| {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                typed.insert(t.split(' ').next().unwrap().to_string());
            }
            if line.starts_with('#') {
                return None;
            }
            let (sample, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
            let family = sample.split('{').next().unwrap();
            let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| family.strip_suffix(s)).filter(|b| typed.contains(*b));
            assert!(typed.contains(family) || base.is_some(), "{family} has no TYPE before it");
            Some((sample.to_string(), value.parse::<f64>().unwrap_or_else(|_| panic!("not a value: {line}"))))
        })
        .collect()
}

#[test]
fn metrics_count_reads_writes_the_cache_and_the_store() {
    let (_dir, root) = store(&[("a", array_doc("[4096]", "[1024]", "uint8", BYTES))]);
    std::fs::create_dir_all(root.join("a/c")).unwrap();
    std::fs::write(root.join("a/c/0"), [7u8; 1024]).unwrap();
    let m = Mount::new(&root, &["--metrics-addr", "127.0.0.1:0"]);
    let log = m.log_text();
    let addr = log.split("metrics at http://").nth(1).and_then(|rest| rest.split("/metrics").next()).unwrap_or_else(|| panic!("{log}"));
    let before = scrape(addr);
    assert_eq!(before["zarrfs_read_bytes_total"], 0.0);

    let mut read = vec![0u8; 2048];
    std::io::Read::read_exact(&mut std::fs::File::open(m.path("a/data")).unwrap(), &mut read).unwrap();
    assert_eq!(&read[..1024], &[7u8; 1024][..]);
    common::write_and_close(&m.path("a/data"), std::fs::OpenOptions::new().write(true), &[9u8; 1000]).unwrap();

    let after = scrape(addr);
    let at_least = |name: &str, least: f64| assert!(after.get(name).is_some_and(|v| *v >= least), "{name}: {:?}", after.get(name));
    at_least("zarrfs_read_bytes_total", 2048.0);
    at_least("zarrfs_written_bytes_total", 1000.0);
    at_least("zarrfs_requests_total{op=\"read\"}", 1.0);
    at_least("zarrfs_requests_total{op=\"write\"}", 1.0);
    at_least("zarrfs_request_seconds_total{op=\"read\"}", f64::MIN_POSITIVE);
    at_least("zarrfs_cache_misses_total", 1.0);
    at_least("zarrfs_chunk_decode_seconds_count", 1.0);
    at_least("zarrfs_chunk_decode_seconds_bucket{le=\"+Inf\"}", 1.0);
    at_least("zarrfs_chunk_encode_seconds_count", 1.0);
    at_least("zarrfs_write_back_chunks_total", 1.0);
    assert_eq!(after["zarrfs_write_back_failures_total"], 0.0);
    assert_eq!(after["zarrfs_dirty_bytes"], 0.0);
    assert_eq!(after[&format!("zarrfs_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))], 1.0);
    if common::backend::is_s3() {
        // Every request the bucket answered, and the writes it took.
        at_least("zarrfs_store_http_requests_total{method=\"PUT\",status=\"2xx\"}", 1.0);
        at_least("zarrfs_store_http_request_seconds_count{method=\"GET\"}", 1.0);
        at_least("zarrfs_store_operations_total{kind=\"put\"}", 1.0);
    } else {
        assert_eq!(after["zarrfs_store_http_requests_total{method=\"GET\",status=\"2xx\"}"], 0.0);
    }
}

#[test]
fn a_metrics_address_in_use_fails_the_mount_and_mounts_nothing() {
    let (_dir, root) = store(&[("a", array_doc("[4]", "[4]", "uint8", BYTES))]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mnt = tempfile::tempdir().unwrap();
    let err = mount_err(&[common::backend::mount_source(&root).as_ref(), mnt.path().as_os_str(), "--metrics-addr".as_ref(), addr.as_ref()]);
    assert!(err.contains(&format!("--metrics-addr {addr}")) && err.contains("in use"), "{err}");
    assert!(!common::is_mounted(mnt.path()));
}

#[test]
fn verbose_logs_show_chunk_reads_and_store_requests_and_a_clean_unmount_warns_of_nothing() {
    let (_dir, root) = store(&[("a", array_doc("[2048]", "[1024]", "uint8", BYTES))]);
    std::fs::create_dir_all(root.join("a/c")).unwrap();
    std::fs::write(root.join("a/c/0"), [7u8; 1024]).unwrap();
    let mut m = Mount::new(&root, &["-v"]);
    assert_eq!(std::fs::read(m.path("a/data")).unwrap().len(), 2048);
    assert!(m.stop().unwrap().success(), "{}", m.log_text());
    let log = m.log_text();
    let line = log.lines().find(|l| l.contains("chunk read and decoded")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("key=\"a/c/0\"") || line.contains("key=a/c/0"), "{line}");
    assert!(line.contains("bytes=1024") && line.contains("fetch_us=") && line.contains("decode_us="), "{line}");
    assert!(log.lines().any(|l| l.contains("chunk absent: fill") && l.contains("a/c/1")), "{log}");
    if common::backend::is_s3() {
        let get = log.lines().find(|l| l.contains("store request") && l.contains("a/c/0")).unwrap_or_else(|| panic!("{log}"));
        assert!(get.contains("method=GET") && get.contains("status=200") && get.contains("took_us="), "{get}");
    }
    assert!(!log.contains("WARN") && !log.contains("Unmount failed"), "{log}");
}

#[test]
fn a_plain_http_endpoint_and_missing_credentials_are_named_before_anything_is_asked() {
    let mnt = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // Nothing listens at the endpoint: what is said comes before any request.
    let refused = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = Command::new(bin());
        c.env_clear().env("PATH", std::env::var_os("PATH").unwrap()).env("HOME", home.path()).env("AWS_ENDPOINT_URL", "http://127.0.0.1:9");
        c.envs(env.iter().copied());
        let out = c.arg("mount").args(args).arg("s3://zarrfs-none/x").arg(mnt.path()).output().unwrap();
        assert!(!out.status.success(), "{env:?} {args:?} mounted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&[], &[]);
    assert!(err.contains("http://127.0.0.1:9 is plain HTTP") && err.contains("AWS_ALLOW_HTTP=true"), "{err}");
    // No keys, no profile: said so, rather than after asking the cloud's metadata address.
    let err = refused(&[("AWS_ALLOW_HTTP", "true")], &[]);
    assert!(err.contains("no credentials for the endpoint") && err.contains("--no-sign-request"), "{err}");
    // A public bucket needs none: the mount goes on to the endpoint.
    let err = refused(&[("AWS_ALLOW_HTTP", "true")], &["--no-sign-request"]);
    assert!(err.contains("cannot reach the server"), "{err}");
}

#[test]
fn a_store_the_user_cannot_write_mounts_read_only_and_another_users_mount_names_its_owner() {
    if !common::probe::root() {
        return;
    }
    let user = common::probe::UserMount::new();
    let out = user.run(
        r#"
        trap 'umount -l {mnt} 2>/dev/null; umount -l {dir}/rootmnt 2>/dev/null' EXIT
        chown -R 0:0 {store}
        as_user {exe} mount {store} {mnt} 2>{dir}/mount.err; echo "MOUNTED $?"
        echo "SAID $(cat {dir}/mount.err)"
        as_user sh -c 'printf x | dd of={mnt}/shapes/d1/data conv=notrunc status=none' 2>{dir}/dd.err; echo "WROTE $?"
        echo "DD $(cat {dir}/dd.err)"
        echo "READ $(as_user sh -c 'wc -c < {mnt}/shapes/d1/data')"
        mkdir {dir}/rootmnt && {exe} mount {store} {dir}/rootmnt
        echo "OTHER $(as_user {exe} unmount {dir}/rootmnt 2>&1)"
        {exe} unmount {dir}/rootmnt
        as_user {exe} unmount {mnt}; echo "UNMOUNTED $?"
        "#,
        std::time::Duration::from_secs(60),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("MOUNTED 0"), "{said} {err}");
    let line = said.lines().find(|l| l.starts_with("SAID")).unwrap();
    assert!(line.contains("is not writable by this user (Permission denied") && line.contains("mounted read-only"), "{line}");
    assert!(said.contains("WROTE 1") && said.contains("Read-only file system"), "{said}");
    assert!(said.contains("READ 17"), "{said}");
    let line = said.lines().find(|l| l.starts_with("OTHER")).unwrap();
    assert!(line.contains("it is root (uid 0)'s mount: only they or root can unmount it"), "{line}");
    assert!(said.contains("UNMOUNTED 0"), "{said}");
}
