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
use crate::headers::Views;
use crate::store::{Location, RemoteOptions};

const EXAMPLES: &str = "\
Examples:
  zarrfs mount weather.zarr /mnt/w                  mount; returns once the mount is live
  zarrfs mount s3://bucket/weather.zarr /mnt/w -o ro,cache_size=4G
  python3 -c 'import numpy as np; print(np.load(\"/mnt/w/temp/data.npy\", mmap_mode=\"r\").mean())'
  zarrfs info weather.zarr                          arrays, shapes, dimension names, codecs
  zarrfs unmount /mnt/w                             store every change, then unmount

Documentation: man zarrfs, and docs/ in the source tree.";

#[derive(Parser, Debug)]
#[command(
    name = "zarrfs",
    version,
    about = "Mount a Zarr store as a directory tree in which every array is one flat raw file",
    after_help = EXAMPLES,
    // `zarrfs` alone shows the help, not an error.
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Mount STORE on MOUNTPOINT; returns once the mount is live (the daemon keeps running).
    #[command(after_help = MOUNT_EXAMPLES)]
    Mount(MountArgs),
    /// Unmount a zarrfs mount point: the daemon stores every change, unmounts and exits. Exit
    /// status 1 when a change could not be stored (what, and why, is said), 3 when the mount is
    /// in use (nothing is done).
    #[command(
        visible_alias = "umount",
        after_help = "Examples:\n  zarrfs unmount /mnt/w\n  zarrfs unmount --lazy /mnt/w   detach it even while files on it are open"
    )]
    Unmount {
        /// The zarrfs mount point to unmount.
        mountpoint: PathBuf,
        /// Detach the mount even while files on it are open (their later changes are refused).
        #[arg(short, long)]
        lazy: bool,
    },
    /// What a mount's daemon holds, what it failed to store, and its recent warnings and errors.
    /// Exit status 1 when changes that failed to store are held. Without MOUNTPOINT: your zarrfs
    /// mounts, a line each (mount point, store, changes held).
    #[command(visible_alias = "list")]
    Status {
        /// The mount point asked about; none: list your zarrfs mounts.
        mountpoint: Option<PathBuf>,
    },
    /// The daemon's own helper (`auto_unmount`): once process PID has exited, unmount what is
    /// still mounted on MOUNTPOINT from device DEV (major:minor).
    #[command(hide = true)]
    UnmountWhenGone { pid: i32, dev: String, mountpoint: PathBuf },
    /// Print the hierarchy: one block per array (shape and dimension names, data type, fill
    /// value, chunks, codecs, stored bytes, views, what can be edited, problems).
    #[command(
        after_help = "Examples:\n  zarrfs info weather.zarr\n  zarrfs info weather.zarr temp --attributes\n  zarrfs info s3://bucket/weather.zarr --json"
    )]
    Info {
        /// The store: a directory, an s3://, gs://, az:// or http(s):// URL, a .zip/.ozx archive,
        /// icechunk:PATH_OR_URL, or a URL pipeline (docs/stores.md).
        store: OsString,
        /// A node inside the store (default: the root).
        path: Option<String>,
        /// Show each node's attributes too.
        #[arg(long)]
        attributes: bool,
        /// Machine-readable output: everything the text shows, attributes included.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Switch an array to the offset chunk key encoding with zero offsets (metadata only), so
    /// that it can be prepended to.
    #[command(mut_arg("virtual_chunks", |a| a.hide(true)))]
    Adopt {
        /// The store: a directory, an s3://, gs://, az:// or http(s):// URL, a .zip/.ozx archive,
        /// icechunk:PATH_OR_URL, or a URL pipeline (docs/stores.md).
        store: OsString,
        /// The array's path inside the store, e.g. temp or surface/pressure.
        array: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Prepend FILE (raw, C order, little-endian; whole chunks along the axis) to an array with
    /// the offset chunk key encoding. No existing chunk is touched.
    #[command(
        after_help = "Examples:\n  zarrfs adopt weather.zarr temp                    once, for a default-encoded array\n  zarrfs prepend weather.zarr temp new-hours.raw"
    )]
    Prepend {
        /// The store: a directory, an s3://, gs://, az:// or http(s):// URL, a .zip/.ozx archive,
        /// icechunk:PATH_OR_URL, or a URL pipeline (docs/stores.md).
        store: OsString,
        /// The array's path inside the store.
        array: String,
        /// The new elements: raw, C order, little-endian, whole chunks along AXIS.
        file: PathBuf,
        /// The axis to grow at its front.
        #[arg(long, default_value_t = 0)]
        axis: usize,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Rewrite an offset-encoded (prepended) array to the default chunk key encoding, so that
    /// any Zarr reader opens it. Safe to interrupt: run it again to finish.
    Normalize {
        /// The store: a directory, an s3://, gs://, az:// or http(s):// URL, a .zip/.ozx archive,
        /// icechunk:PATH_OR_URL, or a URL pipeline (docs/stores.md).
        store: OsString,
        /// The array's path inside the store.
        array: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Write a store into one zip archive that zarrfs mounts (read-only): OUT ending in .ozx is
    /// zipped OME-Zarr as OME RFC-9 recommends (node documents first, breadth-first; entries not
    /// compressed; ZIP64), anything else a zip that zarr-python's ZipStore opens too.
    #[command(
        after_help = "Examples:\n  zarrfs pack image.zarr image.ozx\n  zarrfs pack weather.zarr weather.zip --deflate\n  zarrfs mount weather.zip /mnt/w"
    )]
    Pack {
        /// The store: a directory, an s3://, gs://, az:// or http(s):// URL, a .zip/.ozx archive,
        /// icechunk:PATH_OR_URL, or a URL pipeline (docs/stores.md).
        store: OsString,
        /// The archive to write: NAME.ozx (zipped OME-Zarr) or any other name (a zip).
        out: PathBuf,
        /// Compress the entries with deflate (not for .ozx).
        #[arg(long)]
        deflate: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List the snapshots of an Icechunk repository, newest first from the branch, tag or
    /// snapshot named: ID, time, message. Mount one with SOURCE|icechunk:@ID (read-only); a
    /// mount of the repository shows each as .zarrfs/snapshots/ID.
    #[command(
        after_help = "Examples:\n  zarrfs log icechunk:/data/repo\n  zarrfs log 's3://bucket/repo|icechunk:@branch.dev'\n  zarrfs mount '/data/repo|icechunk:@R67A35M91PE2DEW4QAF0' /mnt/then"
    )]
    Log {
        /// An Icechunk repository (icechunk:PATH_OR_URL, or SOURCE|icechunk:@REF).
        store: OsString,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  zarrfs completions bash > /etc/bash_completion.d/zarrfs\n  zarrfs completions zsh > \"${fpath[1]}/_zarrfs\""
    )]
    Completions {
        /// The shell the script is for.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (zarrfs.1), or write every page (zarrfs.1, zarrfs-mount.1, …) into DIR.
    Man {
        /// Write every page here instead of printing zarrfs.1.
        dir: Option<PathBuf>,
    },
}

const MOUNT_EXAMPLES: &str = "\
Examples:
  zarrfs mount weather.zarr /mnt/w
  zarrfs mount weather.zarr /mnt/w -o ro,allow_other,cache_size=4G
  zarrfs mount -f weather.zarr /mnt/w -v            in the foreground, logging to stderr
  zarrfs mount s3://bucket/weather.zarr /mnt/w --region eu-west-1
  zarrfs mount icechunk:/data/repo /mnt/r            fsync commits to the main branch
  zarrfs mount 's3://bucket/repo|icechunk:@tag.v1' /mnt/r
  zarrfs /data/weather.zarr /mnt/w -o ro            the form mount(8) and fstab use

Every flag has an -o form (cache_size=2G, read_only is ro); generic mount(8) options (nodev,
nosuid, nofail, _netdev, x-systemd.*) are accepted and ignored.";

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
    /// Icechunk: read virtual chunk references from the containers the repository's
    /// configuration names (local files, S3 with these credentials, HTTP), which are outside
    /// the repository. Without it such chunks fail to read (EIO, said in the log).
    #[arg(long)]
    virtual_chunks: bool,
}

impl RemoteArgs {
    fn options(&self) -> RemoteOptions {
        RemoteOptions {
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            no_sign_request: self.no_sign_request,
            virtual_hosted: self.virtual_hosted,
            metadata_ttl: std::time::Duration::ZERO,
            virtual_chunks: self.virtual_chunks,
            consolidated: Some(crate::zarr::consolidated::documents_of),
        }
    }
}

#[derive(clap::Args, Debug)]
struct MountArgs {
    /// A directory; s3://, gs://, az:// or http(s):// (read-only) URL; a .zip/.ozx archive
    /// (read-only); icechunk:PATH_OR_S3_URL (an Icechunk repository's main branch); or a URL
    /// pipeline (SOURCE|zip:PATH, SOURCE|icechunk:@tag.T, ...|zarr3:PATH). See docs/stores.md.
    store: OsString,
    /// An empty directory to mount on (it must exist).
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
    /// Where bytes written to prepend and text rewrites are staged [default: a private
    /// directory made at the first need in $XDG_RUNTIME_DIR, else the temporary directory].
    #[arg(long, value_name = "DIR")]
    spool_dir: Option<PathBuf>,
    /// Decoded chunks kept for re-reads and partial writes, e.g. 512M or 2G [default: 1G].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache_size: Option<u64>,
    /// Seconds the shutdown may spend storing changes before it gives up.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    flush_timeout: u64,
    /// Leave the mount of a daemon that dies (by default a helper process unmounts it).
    #[arg(long)]
    no_auto_unmount: bool,
    /// Changed chunks held in memory before they are written back [default: 256M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    dirty_limit: Option<u64>,
    /// FUSE request threads, 1 to 1024 [default: 8].
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    threads: Option<NonZeroUsize>,
    /// The most bytes one decoded chunk (or shard) may take: arrays whose chunks are larger
    /// show an `error` file instead [default: 2G].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_chunk_size: Option<u64>,
    /// Header views beside `data` (npy, tiff, nifti, envi, nrrd, mhd, vrt) and of groups (ome:
    /// image.ome.tif, nc: dataset.nc), comma-separated; all or none [default: all].
    #[arg(long, value_name = "LIST")]
    views: Option<String>,
    /// Seconds a node's metadata is trusted before its version is checked again (other
    /// writers' changes) [default: 5].
    #[arg(long, value_name = "SECONDS")]
    metadata_ttl: Option<u64>,
    /// This mount is the store's only writer and reader of changes: an open keeps the pages
    /// and chunks already read, however long ago (by default an open after the metadata TTL
    /// reads what other mounts stored since, docs/consistency.md).
    #[arg(long)]
    exclusive: bool,
    #[command(flatten)]
    remote: RemoteArgs,
    /// Serve Prometheus metrics at http://ADDR/metrics: HOST:PORT, or a port alone on the
    /// loopback address [default: none].
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
    /// Log to this file [default: syslog for a background daemon (a file under
    /// ~/.local/state/zarrfs where none listens), stderr with -f].
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Mount options, comma-separated: ro, rw, allow_other, allow_root, cache_size=2G,
    /// dirty_limit=, threads=, views=npy:tiff, adopt_offset, exclusive, spool_dir=, flush_timeout=,
    /// metadata_ttl=, metrics_addr=, max_chunk_size=, noauto_unmount, nonempty, endpoint=, region=, no_sign_request,
    /// virtual_hosted, virtual_chunks; generic mount(8) options are ignored.
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
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
        metrics_addr: args.metrics_addr.clone(),
        verbose: args.verbose,
        cache_size: args.cache_size,
        dirty_limit: args.dirty_limit,
        threads: args.threads,
        adopt_offset: args.adopt_offset,
        exclusive: args.exclusive,
        spool_dir: args.spool_dir.clone(),
        flush_timeout: Duration::from_secs(args.flush_timeout),
        max_chunk_size: args.max_chunk_size,
        metadata_ttl: args.metadata_ttl.map(Duration::from_secs),
        views: args.views.as_deref().map(Views::parse).transpose()?,
        auto_unmount: !args.no_auto_unmount,
        ..Default::default()
    };
    for list in &args.options {
        for o in split_options(list) {
            let (key, value) = match o.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (o.as_str(), None),
            };
            apply_option(&mut plan, key, value).map_err(|e| format!("option {o}: {e}"))?;
        }
    }
    if plan.store.read_only() {
        // Plain HTTP cannot be written, whatever the options say.
        plan.read_only = true;
    }
    if plan.allow_other && plan.allow_root {
        return Err("allow_other and allow_root cannot be combined".into());
    }
    check_ranges(&plan)?;
    Ok(plan)
}

/// The longest wait a shutdown may spend storing, and the longest metadata trust: a day each.
/// Past that a value is a mistake, and near u64::MAX it would overflow the clock.
const MAX_SECONDS: u64 = 24 * 3600;

/// Every value of the plan within what the daemon can honour, checked before anything mounts.
fn check_ranges(plan: &MountPlan) -> Result<(), String> {
    let seconds = |name: &str, d: Duration, least: u64| {
        if d.as_secs() < least || d.as_secs() > MAX_SECONDS {
            return Err(format!("{name} {}: expected {least} to {MAX_SECONDS} seconds", d.as_secs()));
        }
        Ok(())
    };
    // A shutdown with no time to store would always report changes lost.
    seconds("flush_timeout", plan.flush_timeout, 1)?;
    if let Some(ttl) = plan.metadata_ttl {
        seconds("metadata_ttl", ttl, 0)?;
    }
    Ok(())
}

/// One `-o` option, applied to the plan.
fn apply_option(plan: &mut MountPlan, key: &str, value: Option<&str>) -> Result<(), String> {
    match (key, value) {
        // As in libfuse, the last of ro and rw wins.
        ("ro", None) => plan.read_only = true,
        ("rw", None) => plan.read_only = false,
        ("allow_other", None) => plan.allow_other = true,
        ("allow_root", None) => plan.allow_root = true,
        ("auto_unmount", None) => plan.auto_unmount = true,
        ("noauto_unmount", None) => plan.auto_unmount = false,
        ("nonempty", None) => plan.nonempty = true,
        ("flush_timeout", Some(v)) => {
            plan.flush_timeout = Duration::from_secs(v.parse().map_err(|_| "expected whole seconds".to_string())?)
        }
        // Always on (see `crate::fuse::Session::mount`).
        ("default_permissions", None) => {}
        ("cache_size", Some(v)) => plan.cache_size = Some(parse_size(v)?),
        ("dirty_limit", Some(v)) => plan.dirty_limit = Some(parse_size(v)?),
        ("adopt_offset", None) => plan.adopt_offset = true,
        ("exclusive", None) => plan.exclusive = true,
        ("spool_dir", Some(v)) => plan.spool_dir = Some(PathBuf::from(v)),
        ("metrics_addr", Some(v)) => plan.metrics_addr = Some(v.to_string()),
        ("threads", Some(v)) => plan.threads = Some(parse_threads(v)?),
        ("max_chunk_size", Some(v)) => plan.max_chunk_size = Some(parse_size(v)?),
        ("views", Some(v)) => plan.views = Some(Views::parse(v)?),
        ("metadata_ttl", Some(v)) => {
            plan.metadata_ttl = Some(Duration::from_secs(v.parse().map_err(|_| "expected whole seconds".to_string())?))
        }
        ("endpoint", Some(v)) => plan.remote.endpoint = Some(v.to_string()),
        ("region", Some(v)) => plan.remote.region = Some(v.to_string()),
        ("no_sign_request", None) => plan.remote.no_sign_request = true,
        ("virtual_hosted", None) => plan.remote.virtual_hosted = true,
        ("virtual_chunks", None) => plan.remote.virtual_chunks = true,
        (k, None) if is_generic_option(k) => {}
        (k, _) if k.starts_with("x-") => {}
        (k, Some(_)) if is_flag_option(k) => return Err(format!("{k} takes no value")),
        (k, None) if VALUE_OPTIONS.contains(&k) => return Err(format!("{k} needs a value ({k}=...)")),
        _ => return Err("unknown mount option (zarrfs mount --help lists them)".into()),
    }
    Ok(())
}

/// The `-o` options that take no value.
const FLAG_OPTIONS: &[&str] = &[
    "ro",
    "rw",
    "allow_other",
    "allow_root",
    "auto_unmount",
    "noauto_unmount",
    "nonempty",
    "default_permissions",
    "adopt_offset",
    "exclusive",
    "no_sign_request",
    "virtual_hosted",
    "virtual_chunks",
];
/// The `-o` options that take one.
const VALUE_OPTIONS: &[&str] = &[
    "flush_timeout",
    "cache_size",
    "dirty_limit",
    "spool_dir",
    "metrics_addr",
    "threads",
    "max_chunk_size",
    "views",
    "metadata_ttl",
    "endpoint",
    "region",
];

fn is_flag_option(key: &str) -> bool {
    FLAG_OPTIONS.contains(&key)
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
/// `zarrfs mount SOURCE MOUNTPOINT -o …`: when the first argument is no command and names a
/// path or URL (holds a `/`, or exists). Anything else is left to clap, which says what it does
/// not know and what it may have meant.
fn normalize_args(mut args: Vec<OsString>) -> Vec<OsString> {
    let Some(first) = args.get(1) else { return args };
    let name = first.to_str().unwrap_or("");
    // clap adds `help` only when it parses.
    let is_command = name == "help" || <Cli as clap::CommandFactory>::command().find_subcommand(name).is_some();
    let is_source =
        !name.starts_with('-') && (std::os::unix::ffi::OsStrExt::as_bytes(first.as_os_str()).contains(&b'/') || Path::new(first).exists());
    if !is_command && is_source {
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
    // Commands that only print end quietly when their reader goes away (`zarrfs info S | head`),
    // as other Unix tools do. Not the daemon: a peer closing a socket must not kill it.
    if matches!(
        cli.command,
        Command::Info { .. } | Command::Log { .. } | Command::Status { .. } | Command::Completions { .. } | Command::Man { .. }
    ) {
        // SAFETY: restores the default disposition before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command {
        Command::Mount(args) => match plan(args) {
            Ok(plan) => crate::daemon::run(plan),
            Err(e) => {
                eprintln!("zarrfs: {e}");
                ExitCode::from(2)
            }
        },
        Command::Status { mountpoint: None } => match crate::daemon::list_mounts() {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("zarrfs: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Status { mountpoint: Some(mountpoint) } => match crate::daemon::status(&mountpoint) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("zarrfs: {}: {e}", mountpoint.display());
                ExitCode::FAILURE
            }
        },
        Command::UnmountWhenGone { pid, dev, mountpoint } => crate::daemon::unmount_when_gone(pid, &dev, &mountpoint),
        Command::Unmount { mountpoint, lazy } => match crate::daemon::stop(&mountpoint, lazy) {
            Ok(()) => ExitCode::SUCCESS,
            Err(refusal) => {
                eprintln!("zarrfs: cannot unmount {}: {refusal}", mountpoint.display());
                match refusal {
                    crate::daemon::Refusal::Busy(_) => ExitCode::from(EXIT_BUSY),
                    crate::daemon::Refusal::Failed(_) => ExitCode::FAILURE,
                }
            }
        },
        Command::Adopt { store, array, remote } => offline(&store, &remote, |s| crate::commands::adopt(s, &array)),
        Command::Prepend { store, array, file, axis, remote } => {
            offline(&store, &remote, |s| crate::commands::prepend(s, &array, &file, axis))
        }
        Command::Normalize { store, array, remote } => offline(&store, &remote, |s| crate::commands::normalize(s, &array)),
        Command::Pack { store, out, deflate, remote } => offline(&store, &remote, |s| crate::commands::pack(s, &out, deflate)),
        Command::Log { store, remote } => offline(&store, &remote, crate::commands::log),
        Command::Info { store, path, attributes, json, remote } => {
            offline(&store, &remote, |s| crate::commands::info(s, path, attributes, json))
        }
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "zarrfs", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { dir } => match man_pages(dir.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("zarrfs: cannot write the manual pages: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// `zarrfs unmount`'s exit status when the mount is in use and nothing was done.
const EXIT_BUSY: u8 = 3;

/// The manual: `zarrfs.1` on stdout, or every page (`zarrfs.1` and one per command,
/// `zarrfs-mount.1`, …) into `dir`, all from the same definitions as `--help`.
fn man_pages(dir: Option<&Path>) -> std::io::Result<()> {
    let command = <Cli as clap::CommandFactory>::command().after_help(MAN_NOTES);
    let Some(dir) = dir else {
        return main_page(command, &mut std::io::stdout());
    };
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(command.clone(), dir)?;
    // zarrfs.1 again, with the sections clap has no place for.
    main_page(command, &mut std::fs::File::create(dir.join("zarrfs.1"))?)
}

/// zarrfs.1: what clap_mangen renders of the command, then ENVIRONMENT, FILES and EXAMPLES.
fn main_page(command: clap::Command, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(command).render(out)?;
    for (title, entries) in MAN_SECTIONS {
        writeln!(out, ".SH {title}")?;
        for (tag, text) in *entries {
            writeln!(out, ".TP\n{}\n{}", roff_text(tag), roff_text(text))?;
        }
    }
    Ok(())
}

/// `text` as a roff text line: backslashes escaped, and no leading `.` or `'` (a request).
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) { format!("\\&{escaped}") } else { escaped }
}

/// The manual's own sections: (title, [(tag, text)]).
const MAN_SECTIONS: &[(&str, &[(&str, &str)])] = &[
    (
        "ENVIRONMENT",
        &[
            ("AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3", "The S3 endpoint (--endpoint overrides them)."),
            ("AWS_ALLOW_HTTP=true", "Allow an http:// endpoint (requests unencrypted); without it such a mount is refused."),
            (
                "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN",
                "S3 credentials; else AWS_PROFILE in ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE), web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN), the container credential service, or EC2 instance metadata (AWS only, or where AWS_METADATA_ENDPOINT names it).",
            ),
            ("AWS_REGION, AWS_DEFAULT_REGION", "The bucket's region (--region overrides them)."),
            ("AWS_SKIP_SIGNATURE=true", "Anonymous requests, as --no-sign-request."),
            ("GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_SERVICE_ACCOUNT", "gs:// credentials."),
            (
                "AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_USE_EMULATOR",
                "az:// credentials and account (Azurite with the emulator).",
            ),
            ("SSL_CERT_FILE, SSL_CERT_DIR", "A private CA for object stores over TLS."),
            ("XDG_STATE_HOME", "Where a background daemon with no syslog logs (zarrfs/MOUNTPOINT.log)."),
            ("XDG_RUNTIME_DIR", "Where prepends and text rewrites are staged (--spool-dir overrides it)."),
            ("RUST_LOG", "The log level and filter, over -v."),
        ],
    ),
    (
        "FILES",
        &[
            (
                "MOUNTPOINT/.zarrfs/stats, MOUNTPOINT/.zarrfs/errors",
                "The daemon's counters (JSON) and its last 200 warnings and errors; the owner's alone.",
            ),
            (
                "~/.local/state/zarrfs/MOUNTPOINT.log",
                "A background daemon's log where no syslog listens (root: /var/log/zarrfs/); turned over at 16 MiB to MOUNTPOINT.log.1.",
            ),
            (
                "/run/user/UID/zarrfs/ (else /tmp/zarrfs-UID/), /run/zarrfs/ for root",
                "The daemons' control sockets, through which zarrfs unmount asks a daemon to stop.",
            ),
            ("/etc/fstab", "Mounts at boot or on demand (type zarrfs or fuse.zarrfs), through /sbin/mount.zarrfs."),
            ("/etc/zarrfs/INSTANCE.conf", "STORE= and OPTIONS= of the systemd unit zarrfs@INSTANCE.service."),
            ("~/.aws/credentials", "S3 credentials by profile."),
        ],
    ),
    (
        "EXAMPLES",
        &[
            ("zarrfs mount weather.zarr /mnt/w", "Mount a store; returns once the mount is live."),
            (
                "zarrfs mount --metrics-addr 9100 s3://bucket/weather.zarr /mnt/w",
                "Mount a bucket, with Prometheus metrics at http://127.0.0.1:9100/metrics.",
            ),
            (
                "/data/weather.zarr  /mnt/weather  zarrfs  ro,allow_other,nodev,nosuid,nofail  0 0",
                "An /etc/fstab line: mounted at boot, read-only, for every user.",
            ),
            (
                "s3://bucket/weather.zarr  /mnt/s3  zarrfs  region=eu-west-1,_netdev,nofail,x-systemd.automount  0 0",
                "An /etc/fstab line for a bucket, mounted at first use.",
            ),
            ("zarrfs unmount /mnt/w", "Store every change, then unmount; exit 1 naming what could not be stored."),
        ],
    ),
];

/// What the manual adds to `--help`: the files a mount shows, where to read more.
const MAN_NOTES: &str = "\
A mounted array is a directory holding its metadata documents, `data` (every element, C order,
little-endian), header views of it (data.npy, data.tif, data.nii, data.hdr, data.raw.nhdr,
data.mhd, data.vrt) and the write-only `prepend`. Groups are directories; an OME-NGFF image
group also shows image.ome.tif, a pyramidal OME-TIFF of its levels, and a group of arrays with
named axes dataset.nc, a netCDF file of them. `.zarrfs/stats` and `.zarrfs/errors`
at the mount root are the daemon's counters and recent errors.

Exit status: 0 done; 1 failed (the message says why); 2 a wrong command line; 3 `unmount` of a
mount in use (nothing done).

Examples:
  zarrfs mount weather.zarr /mnt/w
  zarrfs info weather.zarr
  zarrfs unmount /mnt/w

Documentation: the docs/ directory of the source tree (installed in /usr/share/doc/zarrfs).";

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
        assert!(!p.remote.virtual_chunks);
        assert!(plan(args(&["-o", "virtual_chunks"])).unwrap().remote.virtual_chunks);
        assert!(plan(args(&["--virtual-chunks"])).unwrap().remote.virtual_chunks);
        assert!(plan(args(&["-o", "virtual_chunks=1"])).is_err());
        assert!(plan(args(&["-o", "bogus"])).unwrap_err().contains("bogus"));
        assert!(plan(args(&["-o", "cache_size=lots"])).is_err());
        for bad in ["flush_timeout=18446744073709551615", "flush_timeout=0", "metadata_ttl=18446744073709551615", "metadata_ttl=86401"] {
            let e = plan(args(&["-o", bad])).unwrap_err();
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
        assert!(plan(args(&["--flush-timeout", "0"])).is_err());
        assert_eq!(plan(args(&["-o", "flush_timeout=86400,metadata_ttl=0"])).unwrap().flush_timeout, Duration::from_secs(86400));
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
