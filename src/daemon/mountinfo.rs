//! What /proc/self/mountinfo says of a mount point: whether something is mounted there, its
//! type, its device and the user who mounted it (and that user's name).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether `path` is itself mounted on (per /proc/self/mountinfo).
pub(super) fn is_mount_point(path: &Path) -> bool {
    mount_type(path).is_some()
}

/// The file system type of the mount at `path` (`fuse.zarrfs` for ours), when `path` is
/// itself mounted on.
pub(super) fn mount_type(path: &Path) -> Option<String> {
    mount_entry(path).map(|m| m.fstype)
}

/// The mount on `path`, found by its canonical path, or its parent's where the mount point
/// itself cannot be resolved (a dead mount, another user's).
pub(super) fn mount_entry(path: &Path) -> Option<MountEntry> {
    let canonical = path.canonicalize().ok().or_else(|| Some(path.parent()?.canonicalize().ok()?.join(path.file_name()?)))?;
    mount_at(&canonical)
}

/// What /proc/self/mountinfo says of a mount.
pub(super) struct MountEntry {
    /// `major:minor`: a FUSE mount's is its connection's own.
    pub(super) dev: String,
    pub(super) fstype: String,
    /// The user who mounted it, as a FUSE mount's `user_id=` says.
    pub(super) owner: Option<u32>,
}

/// The name of user `uid`, as the password database has it.
pub(super) fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: getpwuid_r writes into `pwd` and `buf`, both ours and sized as given; the name
    // it points to lies in `buf`, read before `buf` goes.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found) != 0 || found.is_null() {
            return None;
        }
        Some(std::ffi::CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned())
    }
}

/// The mount on `path` (canonical: a dead mount point cannot be resolved any more), the last
/// one there being the one seen, when `path` is mounted on.
pub(super) fn mount_at(path: &Path) -> Option<MountEntry> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|line| {
            // "id parent major:minor root mount-point options ... - type source options"
            let mut fields = line.split(' ');
            let dev = fields.nth(2)?;
            (unescape_octal(fields.nth(1)?) == path.as_os_str().as_bytes()).then_some(())?;
            let mut tail = line.split(" - ").nth(1)?.split(' ');
            let fstype = tail.next()?;
            let owner = tail.nth(1).and_then(|options| options.split(',').find_map(|o| o.strip_prefix("user_id=")?.parse().ok()));
            Some(MountEntry { dev: dev.to_string(), fstype: fstype.to_string(), owner })
        })
        .next_back()
}

/// A mountinfo path: the kernel writes space, tab, newline and backslash as `\ooo`.
pub(super) fn unescape_octal(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|d| d.iter().try_fold(0u32, |n, &c| (b'0'..=b'7').contains(&c).then(|| n * 8 + u32::from(c - b'0'))));
        match code.and_then(|c| u8::try_from(c).ok()) {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape_octal(r"/tmp/a\040b\011c\012d\134e"), b"/tmp/a b\tc\nd\\e");
        // Not an escape: kept as it is.
        assert_eq!(unescape_octal(r"/x\09\1"), br"/x\09\1");
        assert_eq!(unescape_octal(r"\777"), br"\777");
    }

    #[test]
    fn a_mount_point_with_a_space_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let spaced = dir.path().join("a b");
        std::fs::create_dir(&spaced).unwrap();
        let spaced = spaced.canonicalize().unwrap();
        assert!(mount_at(&spaced).is_none());
        // SAFETY: geteuid cannot fail. Only root may mount a tmpfs.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let c = CString::new(spaced.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C strings; unmounted below before anything may fail.
        let mounted = unsafe { libc::mount(c"zarrfs-test".as_ptr(), c.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) } == 0;
        let why = std::io::Error::last_os_error();
        let found = mount_at(&spaced).map(|m| (m.fstype, m.dev));
        // SAFETY: a valid C string.
        unsafe { libc::umount2(c.as_ptr(), 0) };
        assert!(mounted, "{why}");
        let (fstype, dev) = found.expect("the mount on \"a b\"");
        assert_eq!(fstype, "tmpfs");
        assert!(dev.contains(':'), "{dev}");
    }
}
