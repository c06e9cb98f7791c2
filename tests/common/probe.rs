//! Helpers for the tests that probe the mount as other users, hostile stores and full disks
//! would: small stores, other users, bounded waits, small file systems.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use std::os::unix::fs::PermissionsExt;

/// A v3 array document.
pub fn array_doc(shape: &str, chunks: &str, dtype: &str, codecs: &str) -> String {
    format!(
        r#"{{"zarr_format": 3, "node_type": "array", "shape": {shape}, "data_type": "{dtype}",
  "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": {chunks}}}}},
  "chunk_key_encoding": {{"name": "default", "configuration": {{"separator": "/"}}}},
  "fill_value": 0, "codecs": {codecs}}}"#
    )
}

pub const BYTES: &str = r#"[{"name": "bytes", "configuration": {"endian": "little"}}]"#;
pub const ZSTD: &str = r#"[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]"#;
pub const GZIP: &str = r#"[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]"#;

/// A store in a fresh temporary directory (world-traversable, for the other-user tests):
/// a root group and the given `(path, zarr.json)` nodes.
pub fn store(nodes: &[(&str, String)]) -> (tempfile::TempDir, PathBuf) {
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
pub fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}: a hang"))
}

/// A shell command as the unprivileged user `nobody` (65534), bounded in time.
pub fn as_nobody(script: &str) -> Output {
    let script = script.to_string();
    within(Duration::from_secs(20), "a command as another user", move || {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", &script])
            .output()
            .expect("setpriv (util-linux)")
    })
}

/// Tests that mount a tmpfs, bind /dev/log or switch users need root (CI runs as root).
pub fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("not root: this test is skipped");
    }
    root
}

/// Runs its closure when dropped: cleanup that happens even when an assertion fails.
pub struct OnDrop<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// A 1 MiB tmpfs on `path` (created here), unmounted when the guard drops.
pub fn small_tmpfs(path: &Path) -> OnDrop<impl FnMut() + use<>> {
    std::fs::create_dir(path).unwrap();
    assert!(Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(path).status().unwrap().success());
    let path = path.to_path_buf();
    OnDrop(move || {
        let _ = Command::new("umount").arg("-l").arg(&path).status();
    })
}

pub fn sh(script: &str) -> Output {
    Command::new("sh").args(["-c", script]).output().unwrap()
}

/// A copy of the zarrfs binary that another user can run, in a fresh world-readable directory
/// (removed with the guard): the build's own directory may be closed to them.
pub fn binary_for_others() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("zarrfs");
    std::fs::copy(super::bin(), &exe).unwrap();
    (dir, exe)
}

/// Spawn `command`, again while its program is busy (ETXTBSY): a file just written stays busy
/// while any process forked meanwhile (another test's) still holds it open, until that process
/// execs.
pub fn spawn(command: &mut Command) -> std::process::Child {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => return other.expect("spawn"),
        }
    }
}

/// Wait until `path` is mounted (or the daemon exits first, which fails the test).
pub fn wait_mounted(path: &Path, daemon: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !super::is_mounted(path) {
        if let Some(status) = daemon.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = daemon.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("the mount failed ({status}): {err}");
        }
        assert!(std::time::Instant::now() < deadline, "the mount did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The line of /proc/self/mountinfo for the mount on `path`.
pub fn mountinfo_line(path: &Path) -> String {
    let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find(|l| l.split(' ').nth(4) == canon.to_str()).unwrap_or_default().to_string()
}

/// A user (uid 65534) with a copy of the v3 fixture store and a mount point of their own, and
/// the zarrfs binary where they can run it. A user mounts through the setuid fusermount3, which
/// opens /dev/fuse as the user: 0666 on a stock system, 0600 in some containers (here). So
/// `run` runs its script in a mount namespace of its own in which /dev/fuse is a 0666 node of
/// the same device: the machine's is left alone, and whatever is mounted goes with the
/// namespace.
pub struct UserMount {
    pub dir: tempfile::TempDir,
    pub store: PathBuf,
    pub mnt: PathBuf,
    pub exe: PathBuf,
    _bin: tempfile::TempDir,
}

impl UserMount {
    pub fn new() -> UserMount {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (store, mnt) = (dir.path().join("store"), dir.path().join("mnt"));
        assert!(Command::new("cp").arg("-r").arg(super::fixtures().join("v3.zarr")).arg(&store).status().unwrap().success());
        std::fs::create_dir(&mnt).unwrap();
        assert!(Command::new("chown").args(["-R", "65534:65534"]).arg(&store).arg(&mnt).status().unwrap().success());
        let (bin, exe) = binary_for_others();
        UserMount { dir, store, mnt, exe, _bin: bin }
    }

    /// `script` as root in the namespace, with `as_user CMD` (as uid 65534), `mounted` and
    /// `wait_for CMD` defined and `{dir}`, `{mnt}`, `{store}`, `{exe}` filled in; within `limit`.
    pub fn run(&self, script: &str, limit: Duration) -> Output {
        let script = format!(
            r#"
            as_user() {{ setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }}
            mounted() {{ grep -q " {mnt} " /proc/self/mountinfo; }}
            wait_for() {{ for i in $(seq 500); do "$@" && return 0; sleep 0.02; done; return 1; }}
            mknod {dir}/fuse c 10 229 && chmod 666 {dir}/fuse && mount --bind {dir}/fuse /dev/fuse
            {script}
            "#,
            dir = self.dir.path().display(),
            mnt = self.mnt.display(),
        )
        .replace("{dir}", &self.dir.path().display().to_string())
        .replace("{mnt}", &self.mnt.display().to_string())
        .replace("{store}", &self.store.display().to_string())
        .replace("{exe}", &self.exe.display().to_string());
        within(limit, "a user's mount in a namespace", move || {
            spawn(
                Command::new("unshare")
                    .args(["--mount", "--propagation", "private", "sh", "-c", &script])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped()),
            )
            .wait_with_output()
            .unwrap()
        })
    }
}
