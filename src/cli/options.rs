//! A mount's options merged into a `MountPlan`: clap's flags and the libfuse `-o a,b,c` form
//! (sizes, thread counts, the options mount(8) passes that mean nothing here), and the
//! argument forms of `mount.zarrfs` and fstab.

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Cli, MountArgs};
use crate::daemon::MountPlan;
use crate::headers::Views;
use crate::store::{Location, RemoteOptions};

/// More threads than this would only fail to start (the kernel serves a few dozen at most).
const MAX_THREADS: usize = 1024;

/// The longest wait a shutdown may spend storing, and the longest metadata trust: a day each.
/// Past that a value is a mistake, and near u64::MAX it would overflow the clock.
const MAX_SECONDS: u64 = 24 * 3600;

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
    "lossy_writes",
    "no_sign_request",
    "virtual_hosted",
    "virtual_chunks",
    "trust_consolidated",
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
    "targets",
];

/// Options mount(8) and mount.fuse3 pass that mean nothing to us.
pub(super) fn is_generic_option(o: &str) -> bool {
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

pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                // A number with a unit of its own (`2X`), or no number at all (`lots`).
                _ if t[..i].trim().parse::<f64>().is_ok() => {
                    return Err(format!("size {s:?}: unknown unit {c:?} (use K, M, G or T, as in 512M)"));
                }
                _ => return Err(format!("{s:?} is not a size: a number with an optional unit K, M, G or T (as in 512M or 2G)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: f64 =
        num.trim().parse().map_err(|_| format!("{s:?} is not a size: a number with an optional unit K, M, G or T (as in 512M or 2G)"))?;
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

pub(super) fn parse_threads(s: &str) -> Result<NonZeroUsize, String> {
    match s.parse::<NonZeroUsize>() {
        Ok(n) if n.get() <= MAX_THREADS => Ok(n),
        _ => Err(format!("threads {s:?}: expected a whole number from 1 to {MAX_THREADS}")),
    }
}

/// The mount plan of `zarrfs mount`'s flags and options.
pub(super) fn plan(args: MountArgs) -> Result<MountPlan, String> {
    let store = Location::parse(&args.store)?;
    let mut plan = MountPlan {
        read_only: args.read_only || store.read_only(),
        store,
        remote: RemoteOptions { trust_consolidated: args.trust_consolidated, ..args.remote.options() },
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
        lossy_writes: args.lossy_writes,
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
    if plan.remote.trust_consolidated && !plan.read_only {
        // A write through the mount would change what the consolidation is trusted to say.
        return Err("--trust-consolidated needs a read-only mount (--read-only or -o ro)".into());
    }
    if plan.allow_other && plan.allow_root {
        return Err("allow_other and allow_root cannot be combined".into());
    }
    check_ranges(&plan)?;
    Ok(plan)
}

/// Every value of the plan within what the daemon can honour, checked before anything mounts.
pub(super) fn check_ranges(plan: &MountPlan) -> Result<(), String> {
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
pub(super) fn apply_option(plan: &mut MountPlan, key: &str, value: Option<&str>) -> Result<(), String> {
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
        ("lossy_writes", None) => plan.lossy_writes = true,
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
        ("targets", Some(v)) => plan.remote.targets.push(v.to_string()),
        ("no_sign_request", None) => plan.remote.no_sign_request = true,
        ("virtual_hosted", None) => plan.remote.virtual_hosted = true,
        ("virtual_chunks", None) => plan.remote.virtual_chunks = true,
        ("trust_consolidated", None) => plan.remote.trust_consolidated = true,
        (k, None) if is_generic_option(k) => {}
        (k, _) if k.starts_with("x-") => {}
        (k, Some(_)) if is_flag_option(k) => return Err(format!("{k} takes no value")),
        (k, None) if VALUE_OPTIONS.contains(&k) => return Err(format!("{k} needs a value ({k}=...)")),
        _ => return Err("unknown mount option (zarrfs mount --help lists them)".into()),
    }
    Ok(())
}

pub(super) fn is_flag_option(key: &str) -> bool {
    FLAG_OPTIONS.contains(&key)
}

/// Split a `-o` list on commas, honouring `\,` escapes.
pub(super) fn split_options(list: &str) -> Vec<String> {
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
pub(super) fn normalize_args(mut args: Vec<OsString>) -> Vec<OsString> {
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
pub(super) fn helper_args(args: Vec<OsString>) -> Option<Vec<OsString>> {
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::Command;
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
        // Trusting consolidated metadata is for read-only mounts: the last of ro and rw counts.
        assert!(plan(args(&["-o", "ro,trust_consolidated"])).unwrap().remote.trust_consolidated);
        assert!(plan(args(&["--read-only", "--trust-consolidated"])).unwrap().remote.trust_consolidated);
        for rw in [&["--trust-consolidated"][..], &["-o", "ro,trust_consolidated,rw"]] {
            assert!(plan(args(rw)).unwrap_err().contains("needs a read-only mount"), "{rw:?}");
        }
        assert!(plan(args(&["-o", "bogus"])).unwrap_err().contains("bogus"));
        let lots = plan(args(&["-o", "cache_size=lots"])).unwrap_err();
        assert!(lots.contains("not a size") && lots.contains("512M"), "{lots}");
        assert!(parse_size("2X").unwrap_err().contains("unknown unit 'X'"));
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
