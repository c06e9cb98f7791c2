//! Kernel requests to core calls: each request becomes one call on the `crate::fs::ZarrFs`
//! that serves its inode (the mount's own, or a snapshot's: `crate::fs::Mounted`), and the
//! core's result becomes the reply. It knows fuser's request and reply types and nothing of
//! sessions, mounting or the format.

use std::ffi::OsStr;
use std::time::{Duration, UNIX_EPOCH};

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::Error;
use crate::fs::{Attr, FileKind, Listing, Mounted, Routed};

/// Requests that take longer are logged (at debug level).
const SLOW: Duration = Duration::from_millis(200);

pub struct FuseAdapter {
    fs: Arc<Mounted>,
    uid: u32,
    gid: u32,
    /// How long the kernel may keep entries and attributes that change only with our own
    /// changes (which invalidate them) or another writer's (seen after the metadata TTL).
    ttl: Duration,
    /// The kernel lists directories without opening them (Linux 5.1 on).
    no_opendir: bool,
}

impl FuseAdapter {
    pub fn new(fs: Arc<Mounted>) -> FuseAdapter {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let gid = fs.main().shown_gid();
        let ttl = fs.main().metadata_ttl();
        FuseAdapter { fs, uid, gid, ttl, no_opendir: false }
    }

    /// Run one request on the core: count it (and its error) for `.zarrfs/stats`, log it at
    /// debug level when slow, and answer a panic with EIO instead of losing the thread.
    fn run<T>(&self, op: &'static str, f: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
        let started = Instant::now();
        let result = crate::error::catch(op, f);
        let took = started.elapsed();
        self.fs.main().stats().record(op, took, result.as_ref().err().map(Error::errno));
        if took >= SLOW {
            tracing::debug!(op, took_ms = took.as_millis() as u64, "slow request");
        }
        result
    }

    /// Run a request whose reply carries nothing but success or an errno.
    fn run_empty(&self, op: &'static str, reply: ReplyEmpty, f: impl FnOnce() -> crate::Result<()>) {
        match self.run(op, f) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn ttl(&self, a: &Attr) -> Duration {
        if a.volatile { Duration::ZERO } else { self.ttl }
    }

    /// `a` of a node in `tree`, as the kernel knows it (its inode in the mount).
    fn attr(&self, tree: &Routed, a: &Attr) -> FileAttr {
        let (kind, nlink) = match a.kind {
            FileKind::Directory => (FileType::Directory, 2),
            FileKind::RegularFile => (FileType::RegularFile, 1),
        };
        FileAttr {
            ino: INodeNo(self.fs.outer(tree, a.ino)),
            size: a.size,
            blocks: a.own_bytes.div_ceil(512),
            atime: a.mtime,
            mtime: a.mtime,
            ctime: a.mtime,
            crtime: UNIX_EPOCH,
            kind,
            perm: a.perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 1 << 20,
            flags: 0,
        }
    }
}

fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        let _ = config.set_max_write(1 << 20);
        // Keep cached pages across opens; the kernel drops them when size or mtime changes.
        let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        // O_TRUNC arrives with the open (not as a separate truncate without a file handle), so
        // that a text view knows which handle the new text comes through.
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        // A listing answers the lookups of its entries too: a walk (`find`, `ls -lR`) asks once
        // per directory, not once per name. The kernel asks for it where names are looked up
        // after a listing (auto), so `ls -f` of a huge group gets the lighter plain entries.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // Documents read past the kernel's cache (`ZarrFs::direct_io`) can still be mapped.
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        self.no_opendir = config.capabilities().contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        Ok(())
    }

    fn destroy(&mut self) {
        let report = self.fs.main().flush_all();
        if !report.is_ok() {
            tracing::error!("unmount: {report}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        // The name stands for the node for the TTL even where its attributes are asked for each
        // time (a document's size): a `stat` of it is then one request, not two. (A listing's
        // entries carry one TTL for both: fuser has no other.)
        match self.run("lookup", || self.fs.contents(parent.0).and_then(|t| Ok((t.fs.lookup(t.ino, name)?, t)))) {
            Ok((a, t)) => reply.entry_with_ttls(&self.ttl(&a), &self.ttl, &self.attr(&t, &a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.main().space();
        reply.statfs(s.blocks, s.free, s.available, s.files, s.free_files, s.block_size, 255, s.block_size);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.run("getattr", || self.fs.node(ino.0).and_then(|t| Ok((t.fs.getattr(t.ino)?, t)))) {
            Ok((a, t)) => reply.attr(&self.ttl(&a), &self.attr(&t, &a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let truncate = flags.0 & libc::O_TRUNC != 0;
        match self.run("open", || self.fs.node(ino.0).and_then(|t| Ok((t.fs.open(t.ino, write, truncate, req.pid())?, t)))) {
            Ok((fh, t)) => {
                let keep = if t.fs.keep_cache(t.ino) { FopenFlags::FOPEN_KEEP_CACHE } else { FopenFlags::empty() };
                let direct = if t.fs.direct_io(t.ino) { FopenFlags::FOPEN_DIRECT_IO } else { FopenFlags::empty() };
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR | keep | direct)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.run("read", || self.fs.node(ino.0).and_then(|t| t.fs.read(t.ino, fh.0, offset, size))) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let append = flags.0 & libc::O_APPEND != 0;
        match self.run("write", || self.fs.node(ino.0).and_then(|t| t.fs.write(t.ino, fh.0, offset, data, append))) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A size is a truncate (the times the kernel sends with it are its own). Modes, owners
        // and times are the mount's and cannot be kept: changing them fails rather than pretends.
        let keeps = mode.is_none() && uid.is_none() && gid.is_none() && atime.is_none() && mtime.is_none();
        let result = self.run("setattr", || {
            let t = self.fs.node(ino.0)?;
            let a = match size {
                Some(size) => t.fs.truncate(t.ino, size, fh.map(|f| f.0)),
                None if keeps => t.fs.getattr(t.ino),
                // A scratch file keeps its mode (editors and `sed -i` copy the original's).
                None if uid.is_none() && gid.is_none() && t.fs.set_scratch_mode(t.ino, mode)? => t.fs.getattr(t.ino),
                None => Err(t.fs.refuse_change("modes, owners and times are the mount's own")),
            }?;
            Ok((a, t))
        });
        match result {
            Ok((a, t)) => reply.attr(&self.ttl(&a), &self.attr(&t, &a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        self.run_empty("flush", reply, || self.fs.node(ino.0)?.fs.flush(fh.0, req.pid()));
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.run_empty("fsync", reply, || self.fs.node(ino.0)?.fs.fsync(fh.0));
    }

    // No extended attributes: ENOSYS tells the kernel not to ask again.
    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _ = self.run("release", || {
            self.fs.node(ino.0)?.fs.release(fh.0);
            Ok(())
        });
        reply.ok();
    }

    // Special files have no place in a Zarr store.
    fn mknod(&self, _req: &Request, parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32, _rdev: u32, reply: ReplyEntry) {
        let refused = self.fs.contents(parent.0).map(|t| t.fs.refuse_change("only directories and regular files are made in the mount"));
        reply.error(errno(&refused.unwrap_or_else(|e| e)));
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::EINVAL);
        };
        match self.run("mkdir", || self.fs.contents(parent.0).and_then(|t| Ok((t.fs.mkdir(t.ino, name)?, t)))) {
            Ok((a, t)) => reply.entry(&self.ttl(&a), &self.attr(&t, &a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        self.run_empty("unlink", reply, || self.fs.contents(parent.0).and_then(|t| t.fs.unlink(t.ino, name)));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        self.run_empty("rmdir", reply, || self.fs.contents(parent.0).and_then(|t| t.fs.rmdir(t.ino, name)));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (Some(name), Some(newname)) = (name.to_str(), newname.to_str()) else {
            return reply.error(Errno::EINVAL);
        };
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        self.run_empty("rename", reply, || {
            let (from, to) = (self.fs.contents(parent.0)?, self.fs.contents(newparent.0)?);
            if !Mounted::same_tree(&from, &to) {
                return Err(Error::CrossDevice("between a snapshot and the mount".into()));
            }
            from.fs.rename((from.ino, name), (to.ino, newname), no_replace, req.pid())
        });
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::EINVAL);
        };
        let truncate = flags & libc::O_TRUNC != 0;
        let created = self.run("create", || {
            self.fs.contents(parent.0).and_then(|t| Ok((t.fs.create(t.ino, name, mode & !umask, truncate, req.pid())?, t)))
        });
        match created {
            Ok(((a, fh), t)) => reply.created(&self.ttl(&a), &self.attr(&t, &a), Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    // (batch_forget's default calls this for each inode: fuser keeps its type private.)
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = self.run("forget", || {
            let t = self.fs.node(ino.0)?;
            t.fs.forget(t.ino, nlookup);
            Ok(())
        });
    }

    /// Directories need no handle (`ZarrFs::readdir`): where the kernel can do without
    /// them, ENOSYS tells it to stop asking (it then keeps listings, and checks them against
    /// the directory's mtime); elsewhere a handle of no meaning with the same caching.
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        reply.opened(FileHandle(0), FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE)
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let (listing, t) = match self.run("readdir", || self.fs.contents(ino.0).and_then(|t| Ok((t.fs.readdir(t.ino, offset)?, t)))) {
            Ok(l) => l,
            Err(e) => return reply.error(errno(&e)),
        };
        let dots = [(ino.0, FileType::Directory, "."), (ino.0, FileType::Directory, "..")];
        let all = dots.into_iter().chain(listing.iter().map(|e| {
            let kind = if e.kind == FileKind::Directory { FileType::Directory } else { FileType::RegularFile };
            (self.fs.outer(&t, e.ino), kind, e.name)
        }));
        for (i, (child, kind, name)) in all.enumerate().skip(Listing::position(offset)) {
            if reply.add(INodeNo(child), listing.offset_after(i), kind, name) {
                break;
            }
        }
        reply.ok();
    }

    /// A listing with each entry's attributes: the kernel counts a lookup of every entry it
    /// takes (not `.` and `..`), so each is remembered before it is added, and forgotten again
    /// when the reply is full without it.
    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let listed = self.run("readdirplus", || {
            let t = self.fs.contents(ino.0)?;
            Ok((t.fs.readdir(t.ino, offset)?, t.fs.getattr(t.ino)?, t))
        });
        let (listing, dir, t) = match listed {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        let start = Listing::position(offset);
        for (i, name) in [".", ".."].into_iter().enumerate().skip(start) {
            if reply.add(ino, listing.offset_after(i), name, &Duration::ZERO, &self.attr(&t, &dir), Generation(0)) {
                return reply.ok();
            }
        }
        for (i, e) in listing.iter().enumerate().skip(start.saturating_sub(2)) {
            // An entry whose node left the table since the listing was taken (the kernel forgot
            // it) is looked up again by name; one gone from the store is left out.
            let Ok(a) = t.fs.remember_entry(e.ino).or_else(|_| t.fs.lookup(t.ino, e.name)) else { continue };
            let attr = self.attr(&t, &a);
            if reply.add(attr.ino, listing.offset_after(i + 2), e.name, &self.ttl(&a), &attr, Generation(0)) {
                t.fs.forget(a.ino, 1);
                break;
            }
        }
        reply.ok();
    }
}
