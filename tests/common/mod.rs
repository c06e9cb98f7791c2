//! Shared by the mount tests: fixtures, and a mount of the real binary on a temporary directory
//! that is unmounted when the guard drops, panics included.
#![allow(dead_code)]

pub mod backend;
pub mod model;
pub mod netcdf;
pub mod probe;
pub mod tiff;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The demo store the README's quick start mounts (written by zarr-python).
pub fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("demo/weather.zarr")
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_zarrfs")
}

/// `expected.json`: per `store/path`, the expected bytes and the byte ranges that must fail.
pub struct Expected {
    pub store: String,
    pub path: String,
    pub bytes: Vec<u8>,
    pub bad_ranges: Vec<(usize, usize)>,
    /// numpy's name of the data type (`int32`, `>f8`, `<U5`, `?`).
    pub dtype: String,
    pub shape: Vec<u64>,
}

impl Expected {
    /// The header views the contract shows for this array (docs/views.md): npy for every
    /// fixed-size type; TIFF (2-D and 3-D), NIfTI (up to 7-D, axes ≤ 32767), ENVI, NRRD and
    /// MetaImage for the numeric types each has a code for, with at least one axis and none of
    /// length 0.
    pub fn views(&self) -> Vec<&'static str> {
        let base = self.dtype.trim_start_matches(['<', '>', '|', '=']);
        let base = match base {
            "?" | "b1" => "bool",
            "f8" => "float64",
            "i4" => "int32",
            other => other,
        };
        let sidecar = !self.shape.is_empty() && !self.shape.contains(&0);
        let envi =
            ["bool", "uint8", "int16", "int32", "float32", "float64", "complex64", "complex128", "uint16", "uint32", "int64", "uint64"];
        let nrrd = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64"];
        let tiff = ["bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "float32", "float64"];
        let nifti = [
            "bool",
            "uint8",
            "int16",
            "int32",
            "float32",
            "complex64",
            "float64",
            "int8",
            "uint16",
            "uint32",
            "int64",
            "uint64",
            "complex128",
        ];
        let mut out = vec!["data.npy"];
        if sidecar && tiff.contains(&base) && (2..=3).contains(&self.shape.len()) {
            out.push("data.tif");
        }
        if sidecar && nifti.contains(&base) && self.shape.len() <= 7 && self.shape.iter().all(|&n| n <= 32767) {
            out.push("data.nii");
        }
        if sidecar && envi.contains(&base) {
            out.push("data.hdr");
        }
        if sidecar && nrrd.contains(&base) {
            out.extend(["data.raw.nhdr", "data.mhd"]);
        }
        out
    }
}

pub fn expected() -> Vec<Expected> {
    let text =
        std::fs::read_to_string(fixtures().join("expected.json")).expect("tests/fixtures/expected.json (run scripts/make-fixtures.py)");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("expected.json parses");
    let mut out = Vec::new();
    for (key, entry) in doc.as_object().expect("object") {
        let (store, path) = key.split_once('/').expect("store/path");
        let bytes = std::fs::read(fixtures().join(entry["bin"].as_str().expect("bin"))).expect("expected bytes");
        let bad_ranges = entry
            .get("bad_ranges")
            .and_then(|r| r.as_array())
            .map(|a| a.iter().map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_u64().unwrap() as usize)).collect())
            .unwrap_or_default();
        let dtype = entry["dtype"].as_str().unwrap_or_default().to_string();
        let shape = entry["shape"].as_array().map(|s| s.iter().filter_map(|n| n.as_u64()).collect()).unwrap_or_default();
        out.push(Expected { store: store.to_string(), path: path.to_string(), bytes, bad_ranges, dtype, shape });
    }
    out
}

pub fn is_mounted(path: &Path) -> bool {
    let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let want = canon.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo").map(|m| m.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str()))).unwrap_or(false)
}

/// The daemon's `zarrfs unmount-when-gone` helper (its auto_unmount second chance): there must
/// be exactly one. The mount shows before the daemon starts it, so it is waited for (10 s).
pub fn unmount_helper_of(pid: u32) -> u32 {
    let helpers = || -> Vec<u32> {
        let procs = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        procs
            .filter(|p| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
                let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                ppid == Some(pid) && cmdline.split(|&b| b == 0).any(|a| a == b"unmount-when-gone")
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match helpers()[..] {
            [helper] => return helper,
            [] if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            ref found => panic!("daemon {pid} has {} unmount-when-gone helpers", found.len()),
        }
    }
}

/// Lazily unmounts `path` on drop if it is still mounted: a daemon a test started by hand then
/// sees its session end and exits, even when an assertion failed first.
pub struct UnmountOnDrop(pub PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        force_unmount(&self.0);
    }
}

fn force_unmount(path: &Path) {
    if is_mounted(path) {
        let _ = Command::new("umount").arg("-l").arg(path).status();
    }
}

/// A foreground daemon serving `store` on a fresh temporary mount point.
pub struct Mount {
    pub dir: tempfile::TempDir,
    pub mountpoint: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    /// The store directory (mirrored back from the bucket when the mount stops).
    store: PathBuf,
}

impl Mount {
    pub fn new(store: &Path, extra: &[&str]) -> Mount {
        Mount::with_env(store, extra, &[])
    }

    /// A daemon started with `env` added to its environment.
    pub fn with_env(store: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Mount {
        let dir = tempfile::tempdir().expect("tempdir");
        let mountpoint = dir.path().join("mnt");
        std::fs::create_dir(&mountpoint).expect("mount point");
        let log = dir.path().join("zarrfs.log");
        let child = Command::new(bin())
            .arg("mount")
            .arg("-f")
            .arg(backend::mount_source(store))
            .arg(&mountpoint)
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start zarrfs");
        let mut m = Mount { dir, mountpoint, log, child: Some(child), store: store.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&m.mountpoint) {
            if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("zarrfs exited before mounting ({status}): {}", m.log_text());
            }
            assert!(Instant::now() < deadline, "mount did not come up: {}", m.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).expect("running")
    }

    /// The daemon's resident memory, in bytes (VmRSS).
    pub fn rss(&self) -> u64 {
        self.memory("VmRSS:")
    }

    /// The most resident memory the daemon has had, in bytes (VmHWM).
    pub fn peak_rss(&self) -> u64 {
        self.memory("VmHWM:")
    }

    fn memory(&self, field: &str) -> u64 {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect(field);
        kb * 1024
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mountpoint.join(rel)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL the daemon and leave the mount as the kernel has it.
    pub fn kill_only(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            backend::pull(&self.store);
        }
    }

    /// SIGKILL the daemon (a crash) and clear the dead mount.
    pub fn kill(&mut self) {
        self.kill_only();
        force_unmount(&self.mountpoint);
    }

    /// SIGTERM the daemon and wait: returns its exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        // Against a bucket: mirrored back only when the daemon stored something.
        let changed = if backend::is_s3() && self.child.is_some() { backend::store_changed(&self.mountpoint) } else { Some(false) };
        let status = self.stop_daemon();
        if changed != Some(false) {
            backend::pull(&self.store);
        }
        status
    }

    fn stop_daemon(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                force_unmount(&self.mountpoint);
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                force_unmount(&self.mountpoint);
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.stop();
        force_unmount(&self.mountpoint);
    }
}

/// Read `path` until `check` holds (the kernel is told of a change off the request path), or
/// fail after a few seconds saying `what`.
pub fn eventually(path: &Path, check: impl Fn(&[u8]) -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if check(&std::fs::read(path).unwrap_or_default()) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Open `path` with `opts`, write `bytes`, and close explicitly: the close's error is returned
/// (it is where zarrfs commits prepends and text).
pub fn write_and_close(path: &Path, opts: &std::fs::OpenOptions, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    let fd = f.into_raw_fd();
    // SAFETY: we own fd.
    if unsafe { libc::close(fd) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Every stored file under `dir` with its bytes and mtime.
pub fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    backend::pull(dir);
    snapshot_local(dir)
}

fn snapshot_local(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(snapshot_local(&p));
        } else {
            let meta = std::fs::metadata(&p).unwrap();
            out.insert(p.display().to_string(), (std::fs::read(&p).unwrap(), meta.modified().unwrap()));
        }
    }
    out
}

/// A copy of a fixture store (or any directory) in a fresh temporary directory.
pub fn copy_store(src: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dst = dir.path().join(src.file_name().expect("name"));
    let status = Command::new("cp").arg("-a").arg(src).arg(&dst).status().expect("cp");
    assert!(status.success());
    (dir, dst)
}

/// `dd if=PATH bs=BS` as a subprocess; its stdout, or its stderr as the error.
pub fn dd(path: &Path, bs: &str) -> Result<Vec<u8>, String> {
    let out = Command::new("dd").arg(format!("if={}", path.display())).arg(format!("bs={bs}")).arg("status=none").output().expect("run dd");
    if out.status.success() { Ok(out.stdout) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// A small deterministic generator (no extra crate for tests that need only a few numbers).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// A v3 store at `root` of one uint8 array (`rows`, `cols`) at its root, in chunks of `band`
/// whole rows (bytes codec), each chunk's bytes its band number: a scan tells which chunk every
/// byte came from.
pub fn banded_array(root: &Path, rows: u64, cols: u64, band: u64) {
    let meta = serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": [rows, cols], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [band, cols]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]});
    std::fs::write(root.join("zarr.json"), meta.to_string()).expect("zarr.json");
    for b in 0..rows / band {
        std::fs::create_dir_all(root.join(format!("c/{b}"))).expect("chunk dir");
        std::fs::write(root.join(format!("c/{b}/0")), vec![b as u8; (band * cols) as usize]).expect("chunk");
    }
}
