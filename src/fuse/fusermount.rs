//! Mounting through the setuid `fusermount3`, for a user who may not open /dev/fuse (0600 in
//! many containers): it opens the device as root, mounts it, and hands the descriptor back over
//! a socket named by `_FUSE_COMMFD`, as libfuse falls back to it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const DEV_FUSE: &str = "/dev/fuse";

/// Whether this process may open /dev/fuse itself.
pub fn dev_fuse_opens() -> bool {
    std::fs::OpenOptions::new().read(true).write(true).open(DEV_FUSE).is_ok()
}

/// The helper to mount through: `FUSERMOUNT_PATH` (as fuser and libfuse take it), else
/// `fusermount3` on PATH.
fn helper() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FUSERMOUNT_PATH") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("fusermount3")).find(|p| p.is_file())
}

/// A mount option as fusermount3 reads it; commas and backslashes in a value are escaped.
fn option(o: &fuser::MountOption) -> String {
    let escaped = |v: &str| v.replace('\\', "\\\\").replace(',', "\\,");
    match o {
        fuser::MountOption::FSName(n) => format!("fsname={}", escaped(n)),
        fuser::MountOption::Subtype(s) => format!("subtype={}", escaped(s)),
        fuser::MountOption::NoAtime => "noatime".into(),
        fuser::MountOption::NoDev => "nodev".into(),
        fuser::MountOption::NoSuid => "nosuid".into(),
        fuser::MountOption::RO => "ro".into(),
        fuser::MountOption::DefaultPermissions => "default_permissions".into(),
        fuser::MountOption::CUSTOM(c) => c.clone(),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

/// What to tell a user who can neither open /dev/fuse nor mount through fusermount3.
fn no_way_to_mount(why: &str) -> String {
    let opened = std::fs::OpenOptions::new().read(true).write(true).open(DEV_FUSE).err().map_or_else(String::new, |e| e.to_string());
    format!(
        "cannot open {DEV_FUSE} ({opened}) and {why}: install fuse3 (its setuid fusermount3 mounts for users), or let your user \
         open {DEV_FUSE} (most systems ship it as 0666: chmod 0666 {DEV_FUSE}, or a group that owns it)"
    )
}

/// Mount through fusermount3 with `options` (and `allow_other`, which fuser's ACL implies):
/// the /dev/fuse descriptor of the new mount.
pub fn mount(mountpoint: &Path, options: &[fuser::MountOption], allow_other: bool) -> Result<OwnedFd, String> {
    let Some(helper) = helper() else { return Err(no_way_to_mount("no fusermount3 is installed")) };
    let (ours, theirs) = UnixStream::pair().map_err(|e| format!("cannot make a socket for fusermount3: {e}"))?;
    let mut list: Vec<String> = options.iter().map(option).collect();
    if allow_other {
        list.push("allow_other".into());
    }
    let fd = theirs.as_raw_fd();
    let mut command = Command::new(&helper);
    command
        .arg("-o")
        .arg(list.join(","))
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only fcntl on a descriptor this process owns, between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(|e| no_way_to_mount(&format!("{} cannot run ({e})", helper.display())))?;
    drop(theirs);
    let received = receive_fd(&ours);
    drop(ours);
    let out = child.wait_with_output().map_err(|e| format!("fusermount3: {e}"))?;
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match received {
        Ok(fd) if out.status.success() => Ok(fd),
        // fusermount3 opens /dev/fuse as the user too: where the user may not, neither may it.
        _ if said.contains(DEV_FUSE) => Err(no_way_to_mount(&format!("{} could not either ({said})", helper.display()))),
        Ok(_) => Err(format!("{} failed ({}): {said}", helper.display(), out.status)),
        Err(e) if said.is_empty() => Err(format!("{} mounted nothing: {e}", helper.display())),
        Err(_) => Err(format!("{}: {said}", helper.display())),
    }
}

/// Mount as root: /dev/fuse opened here and the mount(2) call made with the type
/// `fuse.SUBTYPE` and the source `FSNAME` of `options`, as fusermount3 makes it. The /dev/fuse
/// descriptor of the new mount.
pub fn mount_directly(mountpoint: &Path, options: &[fuser::MountOption], allow_other: bool) -> Result<OwnedFd, String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let device = std::fs::OpenOptions::new().read(true).write(true).open(DEV_FUSE).map_err(|e| format!("cannot open {DEV_FUSE}: {e}"))?;
    let mut source = "zarrfs".to_string();
    let mut kind = "fuse".to_string();
    let mut flags: libc::c_ulong = 0;
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = vec![format!("fd={}", device.as_raw_fd()), "rootmode=40000".into(), format!("user_id={uid}"), format!("group_id={gid}")];
    for o in options {
        match o {
            fuser::MountOption::FSName(n) => source = n.clone(),
            fuser::MountOption::Subtype(s) => kind = format!("fuse.{s}"),
            fuser::MountOption::NoAtime => flags |= libc::MS_NOATIME,
            fuser::MountOption::NoDev => flags |= libc::MS_NODEV,
            fuser::MountOption::NoSuid => flags |= libc::MS_NOSUID,
            fuser::MountOption::RO => flags |= libc::MS_RDONLY,
            fuser::MountOption::DefaultPermissions => data.push("default_permissions".into()),
            other => data.push(option(other)),
        }
    }
    if allow_other {
        data.push("allow_other".into());
    }
    let c = |s: &[u8], what: &str| CString::new(s).map_err(|_| format!("the mount's {what} holds a NUL byte"));
    let (source, target, kind, data) = (
        c(source.as_bytes(), "source")?,
        c(mountpoint.as_os_str().as_bytes(), "mount point")?,
        c(kind.as_bytes(), "type")?,
        c(data.join(",").as_bytes(), "options")?,
    );
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let mounted = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), kind.as_ptr(), flags, data.as_ptr().cast()) };
    if mounted != 0 {
        return Err(format!("mount(2) of {}: {}", mountpoint.display(), std::io::Error::last_os_error()));
    }
    Ok(OwnedFd::from(device))
}

/// The descriptor fusermount3 sends as SCM_RIGHTS with one byte of data.
fn receive_fd(socket: &UnixStream) -> std::io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // Room for one descriptor, aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; its pointers are set to buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = loop {
        // SAFETY: recvmsg into the buffers described by `msg`.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "it closed the socket without a descriptor"));
    }
    // SAFETY: walking the control messages recvmsg filled in, within `msg_controllen`.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let fd: i32 = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                if fd >= 0 {
                    return Ok(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "no descriptor came with its message"))
}
