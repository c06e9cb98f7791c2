//! `zarrfs install-system`: what a package manager would put in place, for a zarrfs that came
//! another way (a Python wheel in a venv, a binary copied by hand): the manual pages, mount(8)'s
//! helper, the systemd unit template, the bash completion and a `zarrfs` on the system's PATH,
//! each running this very program, so that `man zarrfs`, `mount -t zarrfs`, fstab lines and
//! `zarrfs@.service` do not find another zarrfs on the system.

use std::path::{Path, PathBuf};

use super::Cli;
use super::man::man_pages;

/// Where the pieces go.
#[derive(clap::Args, Debug)]
pub struct InstallDirs {
    /// `zarrfs` goes in PREFIX/bin (a link to this program), the manual pages in
    /// PREFIX/share/man/man1, the bash completion in PREFIX/share/bash-completion/completions.
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// Where mount(8) looks for its helper mount.zarrfs.
    #[arg(long, default_value = "/sbin")]
    sbin_dir: PathBuf,
    /// Where the unit template zarrfs@.service goes.
    #[arg(long, default_value = "/etc/systemd/system")]
    systemd_dir: PathBuf,
    /// Say what would be put where, and change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// The unit template the packages install, whose `ExecStart` names the program bare.
const UNIT: &str = include_str!("../../systemd/zarrfs@.service");

/// Put every piece in place (or, `dry_run`, say where); the lines say what was done.
pub(super) fn install_system(dirs: &InstallDirs) -> Result<Vec<String>, String> {
    let exe = std::env::current_exe().and_then(|e| e.canonicalize()).map_err(|e| format!("cannot tell where this program is: {e}"))?;
    let shown = exe.display().to_string();
    if shown.contains(['\'', '\n']) {
        return Err(format!("this program's path {shown:?} cannot be written into a shell script"));
    }
    let bin = dirs.prefix.join("bin/zarrfs");
    let man = dirs.prefix.join("share/man/man1");
    let completion = dirs.prefix.join("share/bash-completion/completions/zarrfs");
    let helper = dirs.sbin_dir.join("mount.zarrfs");
    let unit = dirs.systemd_dir.join("zarrfs@.service");
    let mut done = vec![
        format!("{}: a link to {shown} (mount -t fuse.zarrfs and the unit run zarrfs from PATH)", bin.display()),
        format!("{}: mount(8)'s helper for mount -t zarrfs and fstab, running {shown}", helper.display()),
        format!("{}: the unit template, running {shown}", unit.display()),
        format!("{}: the manual pages (man zarrfs)", man.display()),
        format!("{}: the bash completion", completion.display()),
    ];
    if dirs.dry_run {
        done.insert(0, "--dry-run: nothing written; this would be:".into());
        return Ok(done);
    }
    let fail = |what: &Path, e: std::io::Error| format!("cannot write {}: {e}", what.display());
    if bin != exe {
        make_parent(&bin).map_err(|e| fail(&bin, e))?;
        // A zarrfs there before (another install) gives way to this one.
        match std::fs::remove_file(&bin) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(format!("cannot replace {}: {e}", bin.display())),
            _ => {}
        }
        std::os::unix::fs::symlink(&exe, &bin).map_err(|e| fail(&bin, e))?;
    }
    write_file(
        &helper,
        format!("#!/bin/sh\n# mount(8)'s helper: zarrfs takes its form, SOURCE MOUNTPOINT [-o OPTIONS].\nexec '{shown}' \"$@\"\n"),
        0o755,
    )
    .map_err(|e| fail(&helper, e))?;
    write_file(&unit, unit_running(&shown), 0o644).map_err(|e| fail(&unit, e))?;
    man_pages(Some(&man)).map_err(|e| fail(&man, e))?;
    let mut script = Vec::new();
    clap_complete::generate(clap_complete::Shell::Bash, &mut <Cli as clap::CommandFactory>::command(), "zarrfs", &mut script);
    write_file(&completion, String::from_utf8_lossy(&script).into_owned(), 0o644).map_err(|e| fail(&completion, e))?;
    done.push("systemd: run `systemctl daemon-reload` to see the unit".into());
    Ok(done)
}

/// The unit template with `ExecStart` running `exe`.
fn unit_running(exe: &str) -> String {
    UNIT.lines()
        .filter(|l| !l.starts_with("# A bare name"))
        .map(|l| match l.strip_prefix("ExecStart=zarrfs ") {
            Some(rest) => format!("ExecStart={exe} {rest}\n"),
            None => format!("{l}\n"),
        })
        .collect()
}

fn make_parent(path: &Path) -> std::io::Result<()> {
    path.parent().map_or(Ok(()), std::fs::create_dir_all)
}

/// `text` as the file `path` (replaced whole: written beside it, then renamed), with `mode`.
fn write_file(path: &Path, text: String, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    make_parent(path)?;
    let temp = path.with_extension("zarrfs-new");
    std::fs::write(&temp, text)?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&temp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_the_program_installed() {
        let unit = unit_running("/opt/venv/bin/zarrfs");
        assert!(unit.contains("\nExecStart=/opt/venv/bin/zarrfs mount -f $STORE %f $OPTIONS\n"), "{unit}");
        assert!(!unit.contains("ExecStart=zarrfs") && !unit.contains("A bare name"));
    }
}
