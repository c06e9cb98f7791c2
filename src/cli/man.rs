//! The manual pages: `zarrfs.1` and one per command, rendered by clap_mangen from the same
//! definitions as `--help`, with the sections clap has no place for (ENVIRONMENT, FILES, EXAMPLES).

use std::path::Path;

use super::Cli;

/// The manual: `zarrfs.1` on stdout, or every page (`zarrfs.1` and one per command,
/// `zarrfs-mount.1`, …) into `dir`, all from the same definitions as `--help`.
pub(super) fn man_pages(dir: Option<&Path>) -> std::io::Result<()> {
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
pub(super) fn main_page(command: clap::Command, out: &mut dyn std::io::Write) -> std::io::Result<()> {
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
pub(super) fn roff_text(text: &str) -> String {
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
