//! A killed daemon leaves no dead mount behind: a helper process (`zarrfs unmount-when-gone`)
//! outlives it and detaches what is still mounted once the daemon has wholly exited.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::manage::*;
use super::mountinfo::*;

/// A killed daemon must not leave a dead mount behind (`auto_unmount`). fusermount3's own
/// auto_unmount is not used: it needs allow_other or allow_root (other users would see the mount
/// only to have it cleaned up), and it can look too early — a dying daemon closes its socket
/// before its FUSE descriptors, and a fusermount3 that looks in between (3.14 does, about one
/// kill in 30 on a busy machine) finds the mount answering ECONNABORTED, not ENOTCONN, and leaves
/// it mounted. So a child of the daemon (`zarrfs unmount-when-gone`) waits until the daemon has
/// wholly exited, its connection with it, and then detaches what is still mounted from this
/// session.
pub(super) struct UnmountWhenGone(std::process::Child);

impl UnmountWhenGone {
    pub(super) fn start(mountpoint: &Path) -> Option<UnmountWhenGone> {
        let started = (|| {
            let dev = mount_at(mountpoint).ok_or("the mount is not in /proc/self/mountinfo")?.dev;
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            std::process::Command::new(exe)
                .arg("unmount-when-gone")
                .arg(std::process::id().to_string())
                .arg(dev)
                .arg(mountpoint)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                // Out of the terminal's process group: a Ctrl-C stops the daemon, which unmounts.
                .process_group(0)
                .spawn()
                .map_err(|e| e.to_string())
        })();
        started.map(UnmountWhenGone).map_err(|e| tracing::warn!("a killed daemon may leave its mount behind: {e}")).ok()
    }
}

impl Drop for UnmountWhenGone {
    /// The daemon unmounts on its own way out: the helper is not needed any more.
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `zarrfs unmount-when-gone`: wait until process `pid` (the parent) has exited, then detach
/// the mount on `mountpoint` if it is still the dead one from device `dev`.
pub fn unmount_when_gone(pid: i32, dev: &str, mountpoint: &Path) -> ExitCode {
    // An orphan's parent has exited already (threads and all); waking once an hour costs nothing.
    // SAFETY: getppid cannot fail.
    while unsafe { libc::getppid() } == pid && !wait_for_exit(pid, Duration::from_secs(3600)) {}
    if mount_at(mountpoint).is_some_and(|m| m.dev == dev) && is_dead(mountpoint) {
        lazy_unmount(mountpoint);
    }
    ExitCode::SUCCESS
}

/// Whether the FUSE mount on `mountpoint` has lost its daemon. Device numbers are reused, so a
/// later mount may carry this one's: it answers. statfs always asks the daemon (a stat may be
/// answered from the kernel's cache, an open need not ask at all).
pub(super) fn is_dead(mountpoint: &Path) -> bool {
    let Ok(c) = CString::new(mountpoint.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: a valid C string and a statfs buffer of the right type.
    let failed = unsafe {
        let mut buf: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut buf) != 0
    };
    failed && matches!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED))
}
