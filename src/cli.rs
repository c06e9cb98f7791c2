//! The command line: clap's flags and the libfuse `-o a,b,c` form merged into a
//! `MountPlan`, the `mount.zarrfs` and fstab argument forms, and dispatch to the daemon
//! (`mount`, `unmount`) or the offline commands. Nothing here runs a mount.

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::commands::OpenedStore;
use crate::daemon::MountPlan;
use crate::headers::HeaderFormat;
use crate::store::{Location, RemoteOptions};

#[derive(Parser, Debug)]
#[command(name = "zarrfs", version, about = "Mount a Zarr store as a directory tree in which every array is one flat raw file")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Mount STORE on MOUNTPOINT; returns once the mount is live (the daemon keeps running).
    Mount(MountArgs),
    /// Unmount a zarrfs mount point: the daemon stores every change, unmounts and exits; what it
    /// could not store is said, and the exit status is not 0.
    Unmount {
        mountpoint: PathBuf,
        /// Detach the mount even while files on it are open (their later changes are refused).
        #[arg(short, long)]
        lazy: bool,
    },
    /// What a mount's daemon holds, what it failed to store, and its recent warnings and errors.
    Status { mountpoint: PathBuf },
    /// The daemon's own helper (`auto_unmount`): once process PID has exited, unmount what is
    /// still mounted on MOUNTPOINT from device DEV (major:minor).
    #[command(hide = true)]
    UnmountWhenGone { pid: i32, dev: String, mountpoint: PathBuf },
    /// Switch an array to the offset chunk key encoding with zero offsets (metadata only).
    Adopt {
        store: OsString,
        array: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Prepend FILE (raw, C order, little-endian; whole chunks along the axis) to an array.
    Prepend {
        store: OsString,
        array: String,
        file: PathBuf,
        /// The axis to grow at its front.
        #[arg(long, default_value_t = 0)]
        axis: usize,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Print the hierarchy: arrays, shapes, data types, grids, chunk keys, codecs, problems.
    Info {
        store: OsString,
        /// A node inside the store (default: the root).
        path: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// How to reach an object store (`s3://bucket/prefix`, `https://...`); the rest comes from the
/// conventional AWS environment.
#[derive(clap::Args, Debug, Default)]
struct RemoteArgs {
    /// The S3 endpoint, e.g. http://127.0.0.1:9000 (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS).
    #[arg(long)]
    endpoint: Option<String>,
    /// The bucket's region (default: AWS_REGION, AWS_DEFAULT_REGION).
    #[arg(long)]
    region: Option<String>,
    /// Anonymous requests, for public buckets (also AWS_SKIP_SIGNATURE=true).
    #[arg(long)]
    no_sign_request: bool,
    /// Virtual-hosted-style addressing (https://bucket.host/key) instead of path style.
    #[arg(long)]
    virtual_hosted: bool,
}

impl RemoteArgs {
    fn options(&self) -> RemoteOptions {
        RemoteOptions {
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            no_sign_request: self.no_sign_request,
            virtual_hosted: self.virtual_hosted,
        }
    }
}

#[derive(clap::Args, Debug)]
struct MountArgs {
    /// A directory, s3://bucket/prefix (also s3a://), or http(s)://host/path (read-only).
    store: OsString,
    mountpoint: PathBuf,
    /// Stay in the foreground.
    #[arg(short, long)]
    foreground: bool,
    /// Refuse every write (EROFS).
    #[arg(long)]
    read_only: bool,
    /// Switch default-encoded arrays to the offset chunk key encoding when prepend is opened.
    #[arg(long)]
    adopt_offset: bool,
    /// Where bytes written to prepend are staged (default: a private directory made at the first
    /// prepend in $XDG_RUNTIME_DIR, else in the system's temporary directory).
    #[arg(long)]
    spool_dir: Option<PathBuf>,
    /// Decoded-chunk cache size, e.g. 512M or 2G.
    #[arg(long, value_parser = parse_size)]
    cache_size: Option<u64>,
    /// Seconds the shutdown may spend storing changes before it gives up.
    #[arg(long, default_value_t = 30)]
    flush_timeout: u64,
    /// Leave the mount of a daemon that dies (by default a helper process unmounts it).
    #[arg(long)]
    no_auto_unmount: bool,
    /// Changed chunks held in memory before they are written back, e.g. 256M.
    #[arg(long, value_parser = parse_size)]
    dirty_limit: Option<u64>,
    /// FUSE request threads (1 to 1024).
    #[arg(long, value_parser = parse_threads)]
    threads: Option<NonZeroUsize>,
    /// The most bytes one decoded chunk (or shard) may take, e.g. 2G: arrays whose chunks are
    /// larger show an `error` file instead.
    #[arg(long, value_parser = parse_size)]
    max_chunk_size: Option<u64>,
    /// Header views beside `data`: npy, envi, nrrd, mhd (comma-separated), all or none.
    #[arg(long)]
    views: Option<String>,
    /// Seconds a node's metadata is trusted before it is read again (other writers' changes).
    #[arg(long)]
    metadata_ttl: Option<u64>,
    #[command(flatten)]
    remote: RemoteArgs,
    /// Log to this file (a background daemon otherwise logs to syslog, `-f` to stderr).
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// Mount options, comma-separated: ro, allow_other, auto_unmount, cache_size=2G, threads=16, views=npy:nrrd, …
    #[arg(short = 'o', action = clap::ArgAction::Append)]
    options: Vec<String>,
    /// More log output (-v debug, -vv trace).
    #[arg(short, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Options mount(8) and mount.fuse3 pass that mean nothing to us.
fn is_generic_option(o: &str) -> bool {
    matches!(
        o,
        "dev"
            | "suid"
            | "nodev"
            | "nosuid"
            | "exec"
            | "noexec"
            | "auto"
            | "noauto"
            | "user"
            | "nouser"
            | "users"
            | "nofail"
            | "_netdev"
            | "atime"
            | "noatime"
            | "relatime"
            | "async"
            | "defaults"
    ) || o.starts_with("x-")
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("size {s:?}: unknown unit {c:?} (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("size {s:?} is not a number with an optional K/M/G/T unit"))?;
    if n.is_nan() || n < 0.0 {
        return Err(format!("size {s:?} must not be negative"));
    }
    let bytes = n * mult as f64;
    // Past 2^63 a size means nothing on any machine (and would saturate silently).
    if bytes >= (1u64 << 63) as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// More threads than this would only fail to start (the kernel serves a few dozen at most).
const MAX_THREADS: usize = 1024;

fn parse_threads(s: &str) -> Result<NonZeroUsize, String> {
    match s.parse::<NonZeroUsize>() {
        Ok(n) if n.get() <= MAX_THREADS => Ok(n),
        _ => Err(format!("threads {s:?}: expected a whole number from 1 to {MAX_THREADS}")),
    }
}

/// The mount plan of `zarrfs mount`'s flags and options.
fn plan(args: MountArgs) -> Result<MountPlan, String> {
    let store = Location::parse(&args.store)?;
    let mut plan = MountPlan {
        read_only: args.read_only || store.read_only(),
        store,
        remote: args.remote.options(),
        mountpoint: args.mountpoint.clone(),
        foreground: args.foreground,
        log_file: args.log_file.clone(),
        verbose: args.verbose,
        cache_size: args.cache_size,
        dirty_limit: args.dirty_limit,
        threads: args.threads,
        adopt_offset: args.adopt_offset,
        spool_dir: args.spool_dir.clone(),
        flush_timeout: Duration::from_secs(args.flush_timeout),
        max_chunk_size: args.max_chunk_size,
        metadata_ttl: args.metadata_ttl.map(Duration::from_secs),
        views: args.views.as_deref().map(HeaderFormat::parse_list).transpose()?,
        auto_unmount: !args.no_auto_unmount,
        ..Default::default()
    };
    for list in &args.options {
        for o in split_options(list) {
            let (key, value) = match o.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (o.as_str(), None),
            };
            match (key, value) {
                // As in libfuse, the last of ro and rw wins.
                ("ro", None) => plan.read_only = true,
                ("rw", None) => plan.read_only = false,
                ("allow_other", None) => plan.allow_other = true,
                ("allow_root", None) => plan.allow_root = true,
                ("auto_unmount", None) => plan.auto_unmount = true,
                ("noauto_unmount", None) => plan.auto_unmount = false,
                ("flush_timeout", Some(v)) => {
                    plan.flush_timeout = Duration::from_secs(v.parse().map_err(|_| format!("option flush_timeout={v}: expected seconds"))?)
                }
                // Always on (see `crate::fuse::Session::mount`).
                ("default_permissions", None) => {}
                ("cache_size", Some(v)) => plan.cache_size = Some(parse_size(v)?),
                ("dirty_limit", Some(v)) => plan.dirty_limit = Some(parse_size(v)?),
                ("adopt_offset", None) => plan.adopt_offset = true,
                ("spool_dir", Some(v)) => plan.spool_dir = Some(PathBuf::from(v)),
                ("threads", Some(v)) => plan.threads = Some(parse_threads(v)?),
                ("max_chunk_size", Some(v)) => plan.max_chunk_size = Some(parse_size(v)?),
                ("views", Some(v)) => plan.views = Some(HeaderFormat::parse_list(v)?),
                ("metadata_ttl", Some(v)) => {
                    plan.metadata_ttl =
                        Some(Duration::from_secs(v.parse().map_err(|_| format!("option metadata_ttl={v}: expected seconds"))?))
                }
                ("endpoint", Some(v)) => plan.remote.endpoint = Some(v.to_string()),
                ("region", Some(v)) => plan.remote.region = Some(v.to_string()),
                ("no_sign_request", None) => plan.remote.no_sign_request = true,
                ("virtual_hosted", None) => plan.remote.virtual_hosted = true,
                (k, None) if is_generic_option(k) => {}
                (k, _) if k.starts_with("x-") => {}
                _ => return Err(format!("unknown mount option {o:?}")),
            }
        }
    }
    if plan.store.read_only() {
        // Plain HTTP cannot be written, whatever the options say.
        plan.read_only = true;
    }
    if plan.allow_other && plan.allow_root {
        return Err("allow_other and allow_root cannot be combined".into());
    }
    Ok(plan)
}

/// Split a `-o` list on commas, honouring `\,` escapes.
fn split_options(list: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = list.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(s)) = (chars.next(), out.last_mut()) {
                    s.push(n);
                }
            }
            ',' => out.push(String::new()),
            c => {
                if let Some(s) = out.last_mut() {
                    s.push(c);
                }
            }
        }
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// `zarrfs SOURCE MOUNTPOINT -o …` (as mount.fuse3 and a `mount.zarrfs` link run it) means
/// `zarrfs mount SOURCE MOUNTPOINT -o …`.
fn normalize_args(mut args: Vec<OsString>) -> Vec<OsString> {
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or("");
    // clap adds `help` only when it parses.
    let is_command = first == "help"
        || <Cli as clap::CommandFactory>::command().find_subcommand(first).is_some()
        || first.starts_with('-')
        || first.is_empty();
    if !is_command {
        args.insert(1, OsString::from("mount"));
    }
    args
}

/// As `mount.zarrfs` (a link mount(8) runs for `-t zarrfs`): `SOURCE DIR [-sfnv] [-N NS]
/// [-o OPTS] [-t TYPE]` becomes `zarrfs mount SOURCE DIR -o OPTS`. `None`: a fake mount (-f).
fn helper_args(args: Vec<OsString>) -> Option<Vec<OsString>> {
    let mut out: Vec<OsString> = vec!["zarrfs".into(), "mount".into()];
    let mut rest = args.into_iter().skip(1);
    while let Some(a) = rest.next() {
        match a.to_str() {
            Some("-o") => {
                out.push("-o".into());
                out.extend(rest.next());
            }
            Some("-N" | "-t") => {
                rest.next();
            }
            Some(flags) if flags.starts_with('-') && flags.len() > 1 && flags[1..].chars().all(|c| "sfnvwr".contains(c)) => {
                if flags.contains('f') {
                    return None;
                }
                if flags.contains('r') {
                    out.push("-o".into());
                    out.push("ro".into());
                }
            }
            _ => out.push(a),
        }
    }
    Some(out)
}

/// Open the store an offline command works on, then run it.
fn offline(store: &std::ffi::OsStr, remote: &RemoteArgs, command: impl FnOnce(&OpenedStore) -> ExitCode) -> ExitCode {
    let opened = Location::parse(store).and_then(|location| {
        let store = location.open(&remote.options())?;
        store.reach().map_err(|e| format!("{location}: {e}"))?;
        Ok(OpenedStore { store, location })
    });
    match opened {
        Ok(s) => command(&s),
        Err(e) => {
            eprintln!("zarrfs: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let program = args.first().map(Path::new).and_then(Path::file_name).and_then(|n| n.to_str()).unwrap_or("").to_string();
    if program == "mount.zarrfs" {
        match helper_args(args) {
            Some(a) => args = a,
            None => return ExitCode::SUCCESS,
        }
    }
    let cli = match Cli::try_parse_from(normalize_args(args)) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        Command::Mount(args) => match plan(args) {
            Ok(plan) => crate::daemon::run(plan),
            Err(e) => {
                eprintln!("zarrfs: {e}");
                ExitCode::from(2)
            }
        },
        Command::Status { mountpoint } => match crate::daemon::status(&mountpoint) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("zarrfs: {}: {e}", mountpoint.display());
                ExitCode::from(2)
            }
        },
        Command::UnmountWhenGone { pid, dev, mountpoint } => crate::daemon::unmount_when_gone(pid, &dev, &mountpoint),
        Command::Unmount { mountpoint, lazy } => match crate::daemon::stop(&mountpoint, lazy) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("zarrfs: cannot unmount {}: {e}", mountpoint.display());
                ExitCode::FAILURE
            }
        },
        Command::Adopt { store, array, remote } => offline(&store, &remote, |s| crate::commands::adopt(s, &array)),
        Command::Prepend { store, array, file, axis, remote } => {
            offline(&store, &remote, |s| crate::commands::prepend(s, &array, &file, axis))
        }
        Command::Info { store, path, json, remote } => offline(&store, &remote, |s| crate::commands::info(s, path, json)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(opts: &[&str]) -> MountArgs {
        let mut v: Vec<OsString> = ["zarrfs", "mount", "s", "m"].iter().map(OsString::from).collect();
        v.extend(opts.iter().map(OsString::from));
        match Cli::try_parse_from(v).unwrap().command {
            Command::Mount(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options() {
        let p = plan(args(&["-o", "ro,allow_other,cache_size=2G", "-o", "nodev,nosuid,x-systemd.automount,_netdev"])).unwrap();
        assert!(p.read_only && p.allow_other);
        assert_eq!(p.cache_size, Some(2 << 30));
        assert!(plan(args(&["-o", "bogus"])).unwrap_err().contains("bogus"));
        assert!(plan(args(&["-o", "cache_size=lots"])).is_err());
        assert_eq!(split_options(r"a,b\,c,,d"), vec!["a", "b,c", "d"]);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        let fstab = normalize_args(["zarrfs", "/data/x.zarr", "/mnt/x", "-o", "ro"].iter().map(OsString::from).collect());
        assert_eq!(fstab[1], "mount");
        let helper = helper_args(
            ["mount.zarrfs", "/d/x.zarr", "/mnt/x", "-n", "-o", "ro,nofail", "-t", "zarrfs"].iter().map(OsString::from).collect(),
        );
        assert_eq!(helper.unwrap(), ["zarrfs", "mount", "/d/x.zarr", "/mnt/x", "-o", "ro,nofail"].map(OsString::from));
        assert!(helper_args(["mount.zarrfs", "a", "b", "-fv"].iter().map(OsString::from).collect()).is_none());
    }
}
