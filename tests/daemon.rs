//! The daemon as administrators run it: busy mount points, mount(8) with fstab types,
//! systemd readiness, signals while writing, SIGKILL with auto_unmount, and the stats file.

mod common;

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Mount, UnmountOnDrop, bin, copy_store, fixtures, is_mounted, unmount_helper_of};

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mountpoint() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    (dir, mnt)
}

#[test]
fn a_busy_mount_point_is_refused() {
    let m = Mount::new(&fixtures().join("v3.zarr"), &[]);
    let out = Command::new(bin()).arg("mount").arg(fixtures().join("v2.zarr")).arg(&m.mountpoint).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("busy"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::metadata(m.path("shapes/d1/data")).is_ok(), "the first mount is untouched");
}

/// A link to the binary at `path` for the length of a test (removed on drop, if it is ours).
/// mount(8) runs helpers with a clean environment, so only the standard PATH directories and
/// /sbin are searched: a temporary PATH is not seen.
struct Link(&'static Path);

impl Link {
    fn new(path: &'static Path) -> Link {
        if path.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(bin(), path).unwrap_or_else(|e| panic!("root can add {}: {e}", path.display()));
        }
        Link(path)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if std::fs::read_link(self.0).is_ok_and(|t| t == Path::new(bin())) {
            let _ = std::fs::remove_file(self.0);
        }
    }
}

fn mount8(args: &[&str], source: &Path, mnt: &Path) -> std::process::Output {
    Command::new("mount").args(args).arg(source).arg(mnt).output().expect("mount(8)")
}

#[test]
fn mount_with_fstab_types_works() {
    // -t fuse.zarrfs: mount(8) runs mount.fuse3, which runs `zarrfs SOURCE DIR -o OPTS`.
    let _zarrfs = Link::new(Path::new("/usr/local/bin/zarrfs"));
    let (_d, mnt) = mountpoint();
    let out = mount8(&["-t", "fuse.zarrfs", "-o", "ro,nodev,nosuid,nofail,cache_size=64M"], &fixtures().join("v3.zarr"), &mnt);
    assert!(out.status.success(), "mount -t fuse.zarrfs: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(mnt.join("shapes/d1/data")).unwrap().len(), 17);
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    wait_until("the fuse.zarrfs daemon to go", Duration::from_secs(10), || !is_mounted(&mnt));
    // -t zarrfs: mount(8) runs /sbin/mount.zarrfs, a link to the binary.
    let _helper = Link::new(Path::new("/sbin/mount.zarrfs"));
    let (_d2, mnt2) = mountpoint();
    let out = mount8(&["-t", "zarrfs", "-o", "ro,_netdev,x-systemd.automount"], &fixtures().join("v2.zarr"), &mnt2);
    let result = (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned());
    let read = std::fs::read(mnt2.join("zstd/data")).map(|d| d.len());
    let _ = Command::new("umount").arg(&mnt2).status();
    assert!(result.0, "mount -t zarrfs: {}", result.1);
    assert_eq!(read.unwrap(), 7 * 5 * 3 * 4);
    wait_until("the zarrfs daemon to go", Duration::from_secs(10), || !is_mounted(&mnt2));
}

#[test]
fn systemd_hears_ready_only_once_the_mount_answers_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (_d, mnt) = mountpoint();
    let (_s, store) = copy_store(&fixtures().join("v3.zarr"));
    let mut child = Command::new(bin())
        .args(["mount", "-f"])
        .arg(&store)
        .arg(&mnt)
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _unmount = UnmountOnDrop(mnt.clone());
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
    assert!(is_mounted(&mnt), "mounted when READY=1 arrives");
    // A change that must be stored by the stop.
    let f = std::fs::OpenOptions::new().write(true).open(mnt.join("shapes/d1/data")).unwrap();
    std::os::unix::fs::FileExt::write_at(&f, b"zz", 0).unwrap();
    drop(f);
    let helper = unmount_helper_of(child.id());
    // SAFETY: signalling our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!is_mounted(&mnt));
    // The daemon stopped (and reaped) its helper on the way out: nothing is left behind.
    assert!(!Path::new(&format!("/proc/{helper}")).exists());
    let m = Mount::new(&store, &[]);
    assert_eq!(&std::fs::read(m.path("shapes/d1/data")).unwrap()[..2], b"zz");
}

#[test]
fn sigterm_during_a_write_stream_stores_every_acknowledged_write() {
    let (_s, store) = copy_store(&fixtures().join("v3.zarr"));
    let mut m = Mount::new(&store, &[]);
    // shapes/d1: uint8, 17 bytes; appended to in blocks of 1000 bytes, block i all (i % 200) + 1.
    let path = m.path("shapes/d1/data");
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let ack = acknowledged.clone();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        for i in 0.. {
            if f.write_all(&[(i % 200) as u8 + 1; 1000]).is_err() {
                break;
            }
            ack.store(i + 1, Ordering::SeqCst);
        }
    });
    wait_until("some writes", Duration::from_secs(20), || acknowledged.load(Ordering::SeqCst) > 50);
    let status = m.stop().expect("the daemon exits");
    assert!(status.success(), "{status}: {}", m.log_text());
    writer.join().unwrap();
    let log = m.log_text();
    let done = acknowledged.load(Ordering::SeqCst);
    let m = Mount::new(&store, &[]);
    let data = std::fs::read(m.path("shapes/d1/data")).unwrap();
    assert!(data.len() >= 17 + done * 1000, "{} bytes for {done} acknowledged writes: {log}", data.len());
    for i in 0..done {
        assert!(data[17 + i * 1000..17 + (i + 1) * 1000].iter().all(|&b| b == (i % 200) as u8 + 1), "write {i}");
    }
}

#[test]
fn a_killed_daemon_leaves_no_hung_mount_point() {
    let mut m = Mount::new(&fixtures().join("v3.zarr"), &[]);
    assert!(std::fs::read(m.path("shapes/d1/data")).is_ok());
    let mnt = m.mountpoint.clone();
    m.kill_only();
    // auto_unmount (on when fusermount3 is installed) unmounts behind the dead daemon.
    wait_until("auto_unmount", Duration::from_secs(10), || !is_mounted(&mnt));
}

#[test]
fn a_killed_daemons_mount_goes_even_when_fusermount3_misses_it() {
    // fusermount3 can look at a killed daemon's mount while the kernel still tears its
    // connection down; 3.14 then takes it for alive and leaves it. Here it never unmounts at all
    // (this wrapper mounts without auto_unmount), so only the daemon's own helper can.
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("fusermount3");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\nfor a; do shift; set -- \"$@\" \"$(printf %s \"$a\" | sed 's/,auto_unmount//')\"; done\nexec fusermount3 \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut m = Mount::with_env(&fixtures().join("v3.zarr"), &[], &[("FUSERMOUNT_PATH", &wrapper)]);
    assert!(std::fs::read(m.path("shapes/d1/data")).is_ok());
    unmount_helper_of(m.pid());
    // A helper leaves a mount that answers alone, even one with the device it was given (device
    // numbers are reused). Process 1 is not its parent, so it looks at once.
    use std::os::unix::fs::MetadataExt;
    let mnt = m.mountpoint.canonicalize().unwrap();
    let dev = std::fs::metadata(&mnt).unwrap().dev();
    let dev = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let status = Command::new(bin()).args(["unmount-when-gone", "1", &dev]).arg(&mnt).status().unwrap();
    assert!(status.success() && is_mounted(&mnt), "{status}");
    m.kill_only();
    wait_until("the helper's unmount", Duration::from_secs(10), || !is_mounted(&mnt));
}

#[test]
fn the_stats_file_shows_what_the_daemon_does() {
    let m = Mount::new(&fixtures().join("v3.zarr"), &[]);
    std::fs::read(m.path("shapes/d3/data")).unwrap();
    let _ = std::fs::read(m.path("nope"));
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path(".zarrfs/stats")).unwrap()).unwrap();
    assert!(stats["cache"]["misses"].as_u64().unwrap() >= 1, "{stats}");
    assert!(stats["cache"]["decoded_bytes"].as_u64().unwrap() > 0);
    assert!(stats["requests"]["read"].as_u64().unwrap() >= 1);
    // Decoding the array's chunks takes the core more than a microsecond.
    assert!(stats["request_us"]["read"].as_u64().unwrap() >= 1, "{stats}");
    assert!(stats["requests"]["lookup"].as_u64().unwrap() >= 3);
    assert!(stats["errors"]["ENOENT"].as_u64().unwrap() >= 1);
    assert_eq!(stats["dirty_bytes"], 0);
    let err = std::fs::OpenOptions::new().write(true).open(m.path(".zarrfs/stats")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
}

#[test]
fn a_mount_reads_ahead_one_fuse_request() {
    // SAFETY: geteuid cannot fail. Only root may raise a device's read-ahead.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let m = Mount::new(&fixtures().join("v3.zarr"), &[]);
    let dev = std::fs::metadata(&m.mountpoint).unwrap().dev();
    let kb = std::fs::read_to_string(format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev))).unwrap();
    assert_eq!(kb.trim(), "1024");
}

/// A store on a 1 MiB tmpfs holding one uint8 array `a` of 32 rows of 64 KiB (chunks of a row):
/// 2 MiB of noise cannot be stored there.
fn full_disk_store(dir: &Path) -> (common::probe::OnDrop<impl FnMut() + use<>>, PathBuf) {
    let root = dir.join("s.zarr");
    let mounted = common::probe::small_tmpfs(&root);
    std::fs::write(root.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    std::fs::create_dir(root.join("a")).unwrap();
    let doc = common::probe::array_doc("[32, 65536]", "[1, 65536]", "uint8", common::probe::BYTES);
    std::fs::write(root.join("a/zarr.json"), doc).unwrap();
    (mounted, root)
}

fn noise(n: usize) -> Vec<u8> {
    let mut rng = common::Lcg(3);
    (0..n).map(|_| rng.next() as u8).collect()
}

fn unmount_cmd(args: &[&str], mnt: &Path) -> std::process::Output {
    Command::new(bin()).arg("unmount").args(args).arg(mnt).output().unwrap()
}

#[test]
fn an_unmount_that_cannot_store_everything_says_what_and_fails() {
    // SAFETY: geteuid cannot fail. Only root may mount a tmpfs.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_tmpfs, root) = full_disk_store(dir.path());
    let mut m = Mount::new(&root, &[]);
    let writer = std::fs::OpenOptions::new().write(true).open(m.path("a/data")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&writer, &noise(2 << 20), 0).unwrap();
    // A mount in use is refused, naming who uses it.
    let out = unmount_cmd(&[], &m.mountpoint);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "a busy mount: exit 3, nothing done: {said}");
    assert!(said.contains("busy") && said.contains(&format!("{} (", std::process::id())) && said.contains("a/data open"), "{said}");
    assert!(is_mounted(&m.mountpoint));
    // What is held, from the daemon itself (the forks above flushed the writer's file when their
    // copies of its descriptor closed: its stores failed).
    let status = Command::new(bin()).arg("status").arg(&m.mountpoint).output().unwrap();
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains("/a: ") && shown.contains("MiB held") && shown.contains("No space left on device"), "{shown}");
    assert_eq!(status.status.code(), Some(1), "changes that failed to store are held: {shown}");
    // Detached under the writer: the last flush fails, and the unmount says so.
    let out = unmount_cmd(&["--lazy"], &m.mountpoint);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an unmount that lost changes exited 0: {said}");
    // The bytes written and not stored, not the memory held for them.
    assert!(said.contains(&format!("/a ({} bytes written, not stored)", 2 << 20)) && said.contains("No space left on device"), "{said}");
    assert!(!is_mounted(&m.mountpoint));
    let status = m.stop().expect("the daemon exited");
    assert!(!status.success(), "the daemon exited 0 with changes unstored");
    use std::os::fd::IntoRawFd;
    // SAFETY: we own the descriptor.
    assert_ne!(unsafe { libc::close(writer.into_raw_fd()) }, 0, "the writer's close said its changes were stored");
}

#[test]
fn status_and_unmount_of_a_daemon_that_does_not_answer_return_saying_so() {
    let m = Mount::new(&fixtures().join("v3.zarr"), &["--read-only"]);
    let pid = m.pid() as i32;
    // SAFETY: signals to our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let _resume = common::probe::OnDrop(move || unsafe {
        libc::kill(pid, libc::SIGCONT);
    });
    // Stopped for good before it is asked: a request one of its threads took while the stop was
    // on its way would hold the asking thread (uninterruptibly), and the command's exit with it.
    wait_until("the daemon's threads to stop", Duration::from_secs(10), || {
        std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten().all(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
        })
    });
    for args in [vec!["status"], vec!["unmount"]] {
        let started = Instant::now();
        let out = Command::new(bin()).args(&args).arg(&m.mountpoint).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(started.elapsed() < Duration::from_secs(15), "{args:?} waited {:?}", started.elapsed());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
        assert!(said.contains("does not answer") && said.contains("umount -l"), "{args:?}: {said}");
    }
    assert!(is_mounted(&m.mountpoint), "nothing was done to a mount whose daemon does not answer");
}

#[test]
fn sigterm_of_a_daemon_whose_last_flush_fails_exits_non_zero() {
    // SAFETY: geteuid cannot fail. Only root may mount a tmpfs.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_tmpfs, root) = full_disk_store(dir.path());
    let mut m = Mount::new(&root, &[]);
    let path = m.path("a/data");
    let (written, wrote) = std::sync::mpsc::channel();
    let done = std::thread::spawn(move || {
        let writer = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&writer, &noise(2 << 20), 0).unwrap();
        written.send(()).unwrap();
        // Held open until the daemon is gone: the last flush is the daemon's.
        std::thread::sleep(Duration::from_secs(3));
    });
    wrote.recv_timeout(Duration::from_secs(20)).expect("the writes");
    let status = m.stop().expect("the daemon exits");
    assert!(!status.success(), "exit 0 with changes unstored: {}", m.log_text());
    assert!(m.log_text().contains("No space left on device"), "{}", m.log_text());
    done.join().unwrap();
}

#[test]
fn sigterm_with_no_thread_to_be_had_still_stores_every_acknowledged_write() {
    // The daemon's tasks capped at those it runs (a pids cgroup, which binds root too): the
    // shutdown's flush cannot have a thread of its own and runs on the shutting-down one,
    // storing every write acknowledged, and the daemon exits 0.
    let cgroups = Path::new("/sys/fs/cgroup/pids");
    assert!(cgroups.join("cgroup.procs").exists(), "this test needs the cgroup v1 pids controller at {}", cgroups.display());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s.zarr");
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::write(root.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let doc = common::probe::array_doc("[4, 1024]", "[1, 1024]", "uint8", common::probe::BYTES);
    std::fs::write(root.join("a/zarr.json"), doc).unwrap();
    // Removed once the daemon is gone (the mount is dropped first).
    let group = cgroups.join(format!("zarrfs-test-{}", std::process::id()));
    let _remove = common::probe::OnDrop(|| {
        let _ = std::fs::remove_dir(&group);
    });
    let mut m = Mount::new(&root, &[]);
    let bytes = noise(4096);
    // Held open until the daemon is gone: the shutdown's flush is the one that stores them.
    let writer = std::fs::OpenOptions::new().write(true).open(m.path("a/data")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&writer, &bytes, 0).unwrap();
    std::fs::create_dir(&group).unwrap();
    std::fs::write(group.join("cgroup.procs"), m.pid().to_string()).unwrap();
    let tasks = std::fs::read_to_string(group.join("pids.current")).unwrap();
    std::fs::write(group.join("pids.max"), tasks.trim()).unwrap();
    let status = m.stop().expect("the daemon exits");
    let log = m.log_text();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("cannot start a thread to store the changes"), "the flush had a thread after all: {log}");
    drop(writer);
    for row in 0..4 {
        let stored = std::fs::read(root.join(format!("a/c/{row}/0"))).unwrap();
        assert!(stored == bytes[row * 1024..(row + 1) * 1024], "row {row} as stored: {log}");
    }
}

#[test]
fn a_background_daemon_without_syslog_logs_to_a_file_it_names() {
    if Path::new("/dev/log").exists() {
        eprintln!("a syslog listens on this machine: the log file is not used");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (_s, store) = copy_store(&fixtures().join("damaged.zarr"));
    let (_d, mnt) = mountpoint();
    let mount =
        || Command::new(bin()).arg("mount").arg(&store).arg(&mnt).env("HOME", home.path()).env_remove("XDG_STATE_HOME").output().unwrap();
    // Root's logs are in one place, whichever HOME sudo or su left.
    // SAFETY: geteuid cannot fail.
    let dir = if unsafe { libc::geteuid() } == 0 { PathBuf::from("/var/log/zarrfs") } else { home.path().join(".local/state/zarrfs") };
    let log = dir.join(format!("{}.log", mnt.to_string_lossy().trim_matches('/').replace('/', "-")));
    let _remove = common::probe::OnDrop({
        let log = log.clone();
        move || {
            let _ = std::fs::remove_file(&log);
        }
    });
    let out = mount();
    let _unmount = UnmountOnDrop(mnt.clone());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&log.display().to_string()), "the mount did not say where the log is: {said}");
    // A corrupt chunk's error reaches the file, .zarrfs/errors and zarrfs status.
    let _ = std::fs::read(mnt.join("corrupt/data"));
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains("corrupt"), "{logged}");
    let errors = std::fs::read_to_string(mnt.join(".zarrfs/errors")).unwrap();
    assert!(errors.contains("corrupt") && errors.contains("ERROR"), "{errors}");
    let status = Command::new(bin()).arg("status").arg(&mnt).output().unwrap();
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains("corrupt") && shown.contains(&log.display().to_string()), "{shown}");
    let out = unmount_cmd(&[], &mnt);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Mounted there again: the same file, not named again at every mount; status names it.
    let out = mount();
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = Command::new(bin()).arg("status").arg(&mnt).output().unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains(&log.display().to_string()));
    let out = unmount_cmd(&[], &mnt);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
