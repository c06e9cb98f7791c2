//! The command line: clap's flags and the libfuse `-o a,b,c` form merged into a
//! `MountPlan`, the `mount.zarrfs` and fstab argument forms, and dispatch to the daemon
//! (`mount`, `unmount`) or the offline commands. Nothing here runs a mount.

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod install;
mod man;
mod options;

use crate::commands::OpenedStore;
use crate::store::{Location, RemoteOptions};
use man::man_pages;
use options::{helper_args, normalize_args, parse_size, parse_threads, plan};

const EXAMPLES: &str = "\
Examples:
  zarrfs mount weather.zarr /mnt/w                  mount; returns once the mount is live
  zarrfs mount s3://bucket/weather.zarr /mnt/w -o ro,cache_size=4G
  python3 -c 'import numpy as np; print(np.load(\"/mnt/w/temp/data.npy\", mmap_mode=\"r\").mean())'
  zarrfs info weather.zarr                          arrays, shapes, dimension names, codecs
  zarrfs unmount /mnt/w                             store every change, then unmount

Documentation: man zarrfs, and docs/ in the source tree.";

/// The version, and whether this build is partial (`crate::WHOLE_BUILD`).
const VERSION: &str = if crate::WHOLE_BUILD {
    env!("CARGO_PKG_VERSION")
} else {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (a partial build: local stores, zip archives and JSON reference sets; `cargo build --release` adds object storage, Icechunk and parquet reference sets)"
    )
};

#[derive(Parser, Debug)]
#[command(
    name = "zarrfs",
    version = VERSION,
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
    #[command(mut_arg("virtual_chunks", |a| a.hide(true)), mut_arg("targets", |a| a.hide(true)))]
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
    // A log reads no chunk: following virtual ones (or targets) means nothing to it.
    #[command(mut_arg("virtual_chunks", |a| a.hide(true)), mut_arg("targets", |a| a.hide(true)))]
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
    /// Install, system-wide, what a package would for this program (one from a Python wheel in
    /// a venv, one copied by hand): a zarrfs on PATH, mount(8)'s helper, the systemd unit
    /// template, the manual pages and the bash completion, each running this very program
    #[command(after_help = "Examples:
  sudo ~/venv/bin/zarrfs install-system
  zarrfs install-system --dry-run
  zarrfs install-system --prefix ~/.local --sbin-dir ~/.local/sbin --systemd-dir ~/.config/systemd/user")]
    InstallSystem(install::InstallDirs),
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
    /// Reference sets: also read targets beneath this directory or URL prefix (repeatable); only
    /// those beneath the set's own directory (or in its bucket) are read otherwise. Icechunk:
    /// follow the virtual chunk containers beneath it (as --virtual-chunks does for all).
    #[arg(long = "targets", value_name = "PREFIX")]
    targets: Vec<String>,
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
            trust_consolidated: false,
            chunk_merge: Some(crate::zarr::chunk_merge::FOR_STORES),
            // The mount's cache size, set where the mount is made.
            whole_values_budget: None,
            targets: self.targets.clone(),
            uncompress: Some(crate::zarr::codec::table::uncompress),
        }
    }
}

#[derive(clap::Args, Debug)]
struct MountArgs {
    /// A directory; s3://, gs://, az:// or http(s):// (read-only) URL; a .zip/.ozx archive
    /// (read-only); icechunk:PATH_OR_S3_URL (an Icechunk repository's main branch); a kerchunk
    /// reference set (a .json file, or reference:FILE; read-only); or a URL pipeline
    /// (SOURCE|zip:PATH, SOURCE|icechunk:@tag.T, ...|zarr3:PATH). See docs/stores.md.
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
    /// Write arrays whose codecs are lossy (bitround, quantize, fixedscaleoffset, a narrowing
    /// astype or cast_value, float scale_offset): each value written shows at once as the
    /// codecs round it, as zarr-python stores it. Without it such arrays are read-only.
    #[arg(long)]
    lossy_writes: bool,
    /// Object storage, read-only mounts: take the root's consolidated metadata as what the
    /// store holds, as zarr-python does. Walks list nothing and fetch no node document; a node
    /// changed without consolidating shows as consolidated until the next consolidation
    /// (read again after --metadata-ttl). See docs/object-storage.md.
    #[arg(long)]
    trust_consolidated: bool,
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
    /// dirty_limit=, threads=, views=npy:tiff, adopt_offset, exclusive, lossy_writes, spool_dir=, flush_timeout=,
    /// metadata_ttl=, metrics_addr=, max_chunk_size=, noauto_unmount, nonempty, endpoint=, region=, no_sign_request,
    /// virtual_hosted, virtual_chunks, targets=, trust_consolidated; generic mount(8) options are ignored.
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    options: Vec<String>,
    /// More log output (-v debug, -vv trace).
    #[arg(short, action = clap::ArgAction::Count)]
    verbose: u8,
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
        Command::InstallSystem(dirs) => match install::install_system(&dirs) {
            Ok(lines) => {
                for line in lines {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("zarrfs: {e}");
                ExitCode::FAILURE
            }
        },
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
