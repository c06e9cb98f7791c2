//! Key/value stores under the format: a local directory, object storage (S3-compatible or
//! HTTP), and an in-memory map for tests. The core sees one `Store` whichever serves it.

#[cfg(feature = "icechunk")]
mod icechunk;
mod key_tree;
mod lease;
mod local;
mod location;
mod memory;
#[cfg(feature = "object-store")]
mod object;
mod pack;
mod references;
mod remote;
mod zip;

#[cfg(feature = "icechunk")]
pub use icechunk::IcechunkStore;
pub use local::LocalStore;
pub use location::{Location, Reference, check_dir};
pub use memory::MemoryStore;
#[cfg(feature = "object-store")]
pub use object::{ObjectStore, RequestCounts};
pub use pack::{PackOptions, Packed, ZipWriter, pack};
pub use references::{ReferenceStore, SetDirectory};
pub use remote::{RemoteLocation, RemoteOptions};
pub use zip::ZipStore;

/// Decode workers for a mount on object storage: requests wait on the network, so more of them
/// in flight than there are cores. A worker holds its request's slot while it decodes too, so
/// tensorstore's 32 in flight take more workers than that: a cold `dd` of `scripts/bench-s3`'s
/// array (20 ms per request) read at a median of 180 MB/s with 32, 213 with 64 and 198 with 128
/// (5 interleaved runs each).
pub const REMOTE_WORKERS: usize = 64;

use std::sync::Arc;

use crate::Result;

/// A byte range of a stored value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRange {
    /// `len` bytes from `start`.
    Range { start: u64, len: u64 },
    /// The last `n` bytes.
    Suffix(u64),
}

/// One entry of a listing: a name directly under the listed prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub is_dir: bool,
}

/// What a prefix of the store holds (`Store::usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub values: u64,
    pub bytes: u64,
    /// Every value was counted (else the count stopped at its bound).
    pub complete: bool,
}

/// Which write of a value is stored: it changes whenever the value is replaced or rewritten
/// (a file's identity, size and mtime; an object's ETag). A cached copy of a value is reused
/// for a read-modify-write only while its version is the stored one: another program may
/// have rewritten the value since it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version(pub [u64; 5]);

/// What a conditional write (`Store::set_if`, `Store::delete_if`) expects the stored value to
/// be: the version this mount read (or wrote) last, or absent. Another writer's change since
/// makes the write fail with `Error::Conflict`, nothing written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Whatever is stored: a whole value written over another, in one step with the
    /// conditional writes of others (as if before or after each).
    Any,
    Absent,
    At(Version),
}

impl Expect {
    /// What was seen: a version, or `None` for absent.
    pub fn seen(version: Option<Version>) -> Expect {
        version.map_or(Expect::Absent, Expect::At)
    }

    /// Whether the value now stored (`None`: absent) is the one expected.
    pub fn holds(self, now: Option<Version>) -> bool {
        self == Expect::Any || self == Expect::seen(now)
    }
}

/// A lock held in a store (`Store::hold_lock`) until dropped.
pub struct Held {
    guard: Box<dyn HeldLock>,
}

/// What holds a lock: released when dropped.
pub trait HeldLock: Send {
    /// Whether it is still held, asked before what it guards is stored (a lease can be lost
    /// to another holder when its holder could not renew it).
    fn confirm(&self) -> Result<()> {
        Ok(())
    }
}

/// Locks the kernel holds (or nothing to hold) cannot be lost while held.
impl HeldLock for () {}

impl Held {
    pub fn new(guard: impl HeldLock + 'static) -> Held {
        Held { guard: Box::new(guard) }
    }

    /// `Ok` while the lock is still this holder's; `Error::Busy` once another took it over.
    pub fn confirm(&self) -> Result<()> {
        self.guard.confirm()
    }
}

/// The name of the lock of `key` beside it: hidden, and a temporary name that no tool of this
/// project takes for a node or a chunk (`is_temporary`).
pub fn lock_name(key: &str) -> String {
    match key.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/.{name}.zarrfs-lock.tmp"),
        None => format!(".{key}.zarrfs-lock.tmp"),
    }
}

/// A value as read, with the version it was read at.
pub struct Value {
    pub bytes: Vec<u8>,
    pub version: Version,
}

/// One snapshot of a store's history: its ID (what `|icechunk:@ID` mounts), when it was made
/// (RFC 3339) and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub made: String,
    pub message: String,
}

/// What is known of a stored value without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: u64,
    pub version: Version,
}

/// A file system's space as `statfs` reports it (`Store::space`): blocks of `block_size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    pub block_size: u32,
    pub blocks: u64,
    pub free: u64,
    pub available: u64,
    pub files: u64,
    pub free_files: u64,
}

impl Space {
    /// What a store without a size shows (object storage): a petabyte, all free, as
    /// mountpoint-s3 and s3fs report a large nominal size, so that tools that check the free
    /// space before writing go ahead.
    pub const NOMINAL: Space =
        Space { block_size: 4096, blocks: 1 << 38, free: 1 << 38, available: 1 << 38, files: 1 << 32, free_files: 1 << 32 };
}

/// What a process claims a whole store for (`Store::claim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A read-write mount serves it: keys stay where its metadata says.
    Serving,
    /// An offline command moves its keys (`zarrfs normalize`): no mount may serve it meanwhile.
    Rewriting,
}

/// Who a store lets at a value or a directory, where it has such a notion (a local directory's
/// permission bits and group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permissions {
    pub mode: u32,
    pub gid: u32,
    /// The name is a link: its own bits say nothing of who may read what it leads to.
    pub link: bool,
}

/// Keys are `/`-separated paths relative to the store root, never starting with `/`.
pub trait Store: Send + Sync {
    /// The whole value with its version, or `None` when the key is absent. A value of more
    /// than `max` bytes is refused without being read: what a chunk or a document can hold is
    /// known before it is read, and a store may be hostile.
    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>>;
    /// The whole value (`get_value` without the version).
    fn get(&self, key: &str, max: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.get_value(key, max)?.map(|v| v.bytes))
    }
    /// A node document to be parsed: `get_value`, or what stands for it without a request —
    /// on object storage, the entry consolidated metadata holds for a document stored before
    /// it. Its bytes may then differ from the stored ones (not its meaning, nor its version):
    /// never serve them as the document's.
    fn get_document(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.get_value(key, max)
    }
    /// `get_value`, asked of the store itself even where a recent listing could answer (as
    /// `head_current`): what a write is decided on.
    fn get_current(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.get_value(key, max)
    }
    /// The length and version of a value, or `None` when the key is absent; nothing is read.
    fn head(&self, key: &str) -> Result<Option<Head>>;
    /// Why no array here can take rows in front, whatever its chunk key encoding, if none can.
    fn prepend_refusal(&self) -> Option<&'static str> {
        None
    }
    /// `head`, asked of the store itself even where a recent listing could answer: what a write
    /// is decided on (another writer's change within the metadata TTL must count).
    fn head_current(&self, key: &str) -> Result<Option<Head>> {
        self.head(key)
    }
    /// Part of a value, or `None` when the key is absent. A range past the end is an error.
    fn get_range(&self, key: &str, range: ByteRange) -> Result<Option<Vec<u8>>> {
        Ok(self.get_range_versioned(key, range)?.map(|(bytes, _)| bytes))
    }
    /// Part of a value with the version of the value it is part of (what was read is what the
    /// version says: a shard's index and its inner chunks are told to be of one write).
    fn get_range_versioned(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>>;
    /// Write a value so that readers see either the old or the new one, never a torn one.
    /// Returns the version written.
    fn set(&self, key: &str, value: &[u8]) -> Result<Version>;
    /// Remove a key; absent keys are not an error.
    fn delete(&self, key: &str) -> Result<()>;
    /// `set`, only if the stored value is still what `expect` says, checked and written as one
    /// step against every other writer that writes conditionally (other mounts, other hosts):
    /// else `Error::Conflict` and nothing written.
    fn set_if(&self, key: &str, value: &[u8], expect: Expect) -> Result<Version>;
    /// `delete`, only if the stored value is still what `expect` says (`Absent`: nothing to
    /// remove, if nothing is there), as one step; else `Error::Conflict`. Stores that cannot
    /// delete conditionally (`deletes_conditionally` false) refuse with `Error::Unsupported`:
    /// their caller stores what the deletion stands for instead.
    fn delete_if(&self, key: &str, expect: Expect) -> Result<()>;
    /// Hold the lock named by `key` (a value of its own beside it, or a lock on one) against
    /// every other mount of the store, on this host or another, until the guard drops: what
    /// makes changes of an array's shape one at a time. Waits at most `wait` for another
    /// holder, then fails with `Error::Busy` naming it. A holder that died (a killed daemon, a
    /// lost host) does not hold it for ever.
    fn hold_lock(self: Arc<Self>, key: &str, wait: std::time::Duration) -> Result<Held>;
    /// Whether `delete_if` deletes over a version (an object store whose server ignores a
    /// DELETE's condition does not).
    fn deletes_conditionally(&self) -> bool {
        true
    }
    /// Whether each request costs a round trip to a server (object storage): then reads fetch
    /// neighbouring values together (the inner chunks of a shard) rather than one request
    /// each, which on a local disk would only take decoding off the other cores.
    fn requests_are_round_trips(&self) -> bool {
        false
    }
    /// Whether the store arbitrates concurrent writers itself when changes are made durable
    /// (an Icechunk session's commit, which rebases or fails): then no lock of the store's own
    /// is taken to change an array's shape.
    fn arbitrates_commits(&self) -> bool {
        false
    }
    /// The names directly under `prefix` (`""` for the root, otherwise ending without `/`).
    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>>;
    /// Claim the store for `claim` for as long as it is open: a read-write mount serves it
    /// (many may at once), an offline command that moves keys rewrites it (alone). A claim
    /// another holds fails at once (`Error::Busy`, saying whose). Stores without such locks
    /// (object storage, where a rewrite holds each array's shape lock instead) claim nothing.
    fn claim(&self, claim: Claim) -> Result<()> {
        let _ = claim;
        Ok(())
    }
    /// Names directly under `prefix` that are no key (not UTF-8: a local file system allows
    /// any bytes, Zarr keys are text), their bytes escaped; `list_dir` leaves them out.
    fn unnamed(&self, prefix: &str) -> Result<Vec<String>> {
        let _ = prefix;
        Ok(Vec::new())
    }
    /// The names directly under `prefix` when there are at most `max` of them, else `None`: a
    /// listing whose cost stays within `max` names however large the directory is.
    fn list_names_upto(&self, prefix: &str, max: usize) -> Result<Option<Vec<String>>> {
        let entries = self.list_dir(prefix)?;
        Ok((entries.len() <= max).then(|| entries.into_iter().map(|e| e.name).collect()))
    }
    /// Remove every key under `prefix` (a node's directory), and the directory itself where
    /// the store has directories. Returns how many values were removed. Links are removed,
    /// never followed.
    fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        let mut removed = 0;
        for entry in self.list_dir(prefix)? {
            let key = join(prefix, &entry.name);
            if entry.is_dir {
                removed += self.delete_prefix(&key)?;
            } else {
                self.delete(&key)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
    /// Remove `keys`; absent keys are not an error.
    fn delete_many(&self, keys: &[String]) -> Result<()> {
        keys.iter().try_for_each(|k| self.delete(k))
    }
    /// Remove the directories at and beneath `prefix` that hold nothing (where the store has
    /// directories): what deleted keys leave behind.
    fn remove_empty_dirs(&self, prefix: &str) -> Result<()> {
        let _ = prefix;
        Ok(())
    }
    /// Move the node at `from` (its documents and chunks) to `to`, which must not exist, in one
    /// step. Stores that cannot rename in one step refuse with `Error::CrossDevice`, so that a
    /// `mv` through the mount copies instead.
    fn rename_prefix(&self, from: &str, to: &str) -> Result<()> {
        let _ = (from, to);
        Err(crate::Error::CrossDevice("an object store cannot rename a prefix in one step".into()))
    }
    /// Move the value at `from` to `to`, replacing what `to` holds: by a rename where the
    /// store has them, else a copy and then the deletion of `from` (a crash between them leaves
    /// both, never neither). An absent `from` is `NotFound`.
    fn move_value(&self, from: &str, to: &str) -> Result<()> {
        let value = self.get(from, u64::MAX)?.ok_or(crate::Error::NotFound)?;
        self.set(to, &value)?;
        self.delete(from)
    }
    /// How many values the store holds under `prefix` (its own documents included) and their
    /// bytes, counting at most `most` values; `None` where the store cannot say (plain HTTP).
    fn usage(&self, prefix: &str, most: u64) -> Result<Option<Usage>> {
        let _ = (prefix, most);
        Ok(None)
    }
    /// Why the directory at `key` is not followed, when it is a link (to another directory of
    /// the store, or out of it): links can make a tree without end, and a node is one place.
    fn dir_link(&self, key: &str) -> Result<Option<String>> {
        let _ = key;
        Ok(None)
    }
    /// The permissions the store itself gives `key` (a value or a directory; `""` is the root),
    /// or `None` when it is absent or the store has none (object storage).
    fn permissions(&self, key: &str) -> Result<Option<Permissions>> {
        let _ = key;
        Ok(None)
    }
    /// Make the given keys (written or deleted) durable: their data and their directories.
    fn sync(&self, keys: &[String]) -> Result<()>;
    /// The space of the file system the store lives on, where it has one (a local directory);
    /// `None` for object storage, which has no such bound.
    fn space(&self) -> Option<Space> {
        None
    }
    /// The requests made so far, by kind, for stores that make requests.
    fn requests(&self) -> Option<serde_json::Value> {
        None
    }
    /// The snapshots of a store that keeps them (an Icechunk repository), newest first from
    /// the mounted one; `None` for stores that keep no history.
    fn history(&self) -> Result<Option<Vec<Snapshot>>> {
        Ok(None)
    }
    /// Reach the store once and say in one line why it cannot be used: a missing bucket,
    /// refused credentials, a wrong region or an unreachable endpoint. A local store is there.
    fn reach(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

impl Location {
    /// Open the store. Nothing is asked of an object store yet: its first request (the root's
    /// metadata, or `Store::reach`) tells whether it can be used.
    pub fn open(&self, options: &RemoteOptions) -> std::result::Result<Arc<dyn Store>, String> {
        match self {
            Location::Local(path) => {
                check_dir("store", path)?;
                Ok(Arc::new(LocalStore::open(path).map_err(|e| format!("store {}: {e}", path.display()))?))
            }
            Location::Zip { container, archive, root } => {
                let container = container.open(&options.for_container())?;
                let zip = ZipStore::open(container, archive, root).map_err(|e| format!("{self}: {e}"))?;
                Ok(Arc::new(zip))
            }
            Location::References { container, file } => {
                // Relative targets are beside the set: a JSON file's directory, a parquet set
                // directory's parent.
                let beside = |dir: &std::path::Path| {
                    if file == location::PARQUET_SET { dir.parent().unwrap_or(dir).to_path_buf() } else { dir.to_path_buf() }
                };
                let base = match container.as_ref() {
                    Location::Local(dir) => SetDirectory::Local(beside(dir)),
                    Location::Remote(dir) if file == location::PARQUET_SET => {
                        SetDirectory::Remote(dir.split_last().map_or_else(|| dir.clone(), |(parent, _)| parent))
                    }
                    Location::Remote(dir) => SetDirectory::Remote(dir.clone()),
                    other => return Err(format!("{self}: a reference set is read from a directory or an object store, not {other}")),
                };
                let store = container.open(&options.for_container())?;
                Ok(Arc::new(ReferenceStore::open(store, file, base, options).map_err(|e| format!("{self}: {e}"))?))
            }
            #[cfg(feature = "icechunk")]
            Location::Icechunk { repo, reference, root } => {
                Ok(Arc::new(IcechunkStore::open(repo, reference, root, options).map_err(|e| format!("{self}: {e}"))?))
            }
            #[cfg(not(feature = "icechunk"))]
            Location::Icechunk { .. } => {
                Err(format!("{self}: this build has no Icechunk support (cargo feature icechunk): {}", crate::BUILD_IT_WHOLE))
            }
            #[cfg(feature = "object-store")]
            // What `open` refuses says so itself, naming the store.
            Location::Remote(remote) => Ok(Arc::new(ObjectStore::open(remote, options).map_err(|e| match e {
                crate::Error::Invalid(why) => why,
                e => e.to_string(),
            })?)),
            #[cfg(not(feature = "object-store"))]
            Location::Remote(remote) => {
                let _ = options;
                Err(format!("{remote}: this build has no object storage support (cargo feature object-store): {}", crate::BUILD_IT_WHOLE))
            }
        }
    }
}

/// The writing half of `Store` for stores nothing is written to (zip archives, reference sets):
/// every change is EROFS, and there is nothing to make durable.
macro_rules! read_only_writes {
    () => {
        fn set(&self, _key: &str, _value: &[u8]) -> $crate::Result<$crate::store::Version> {
            Err($crate::Error::ReadOnly)
        }

        fn delete(&self, _key: &str) -> $crate::Result<()> {
            Err($crate::Error::ReadOnly)
        }

        fn set_if(&self, _key: &str, _value: &[u8], _expect: $crate::store::Expect) -> $crate::Result<$crate::store::Version> {
            Err($crate::Error::ReadOnly)
        }

        fn delete_if(&self, _key: &str, _expect: $crate::store::Expect) -> $crate::Result<()> {
            Err($crate::Error::ReadOnly)
        }

        fn hold_lock(self: std::sync::Arc<Self>, _key: &str, _wait: std::time::Duration) -> $crate::Result<$crate::store::Held> {
            Err($crate::Error::ReadOnly)
        }

        fn sync(&self, _keys: &[String]) -> $crate::Result<()> {
            Ok(())
        }
    };
}
pub(crate) use read_only_writes;

/// Whether `name` is a temporary name a local store's `set` writes through (one left by a
/// crash): `.NAME.zarrfs-PID-N.tmp`.
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.contains(".zarrfs-")
}

/// The store key of `name` under `prefix`.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}/{name}") }
}

/// The node documents a directory's consolidated metadata holds, by key below that directory
/// (`a/b/zarr.json`, `a/b/.zarray`), each as its entry renders it.
pub type ConsolidatedDocuments = std::collections::BTreeMap<String, Vec<u8>>;

/// Reads a directory's own document `name` (`zarr.json`, `.zmetadata`) as consolidated
/// metadata, if it is. Storage knows keys, bytes and versions, not Zarr documents: the format
/// layer supplies this (`zarr::consolidated::documents_of`) and whoever opens a store passes it
/// in `RemoteOptions`, so that walks on object storage take documents from it.
pub type ReadConsolidated = fn(name: &str, bytes: &[u8]) -> Option<ConsolidatedDocuments>;

/// A whole value compressed as its first bytes say (gzip, zstd, bzip2, xz), decompressed into
/// at most `max` bytes, with the compressor's name; one that is none of them as it is, with
/// `None`. The format layer's codecs do it (`zarr::codec::table::uncompress`), handed to the
/// store by whoever opens it, as `ReadConsolidated` is: reference sets compressed by fsspec.
pub type Uncompress = fn(bytes: Vec<u8>, max: usize) -> Result<(Option<&'static str>, Vec<u8>)>;

/// The versions of one chunk a merge takes (each `None` where the chunk is absent): as both
/// writers found it, as this one made it, as the other left it.
#[derive(Clone, Copy, Debug)]
pub struct ChunkVersions<'a> {
    pub base: Option<&'a [u8]>,
    pub ours: Option<&'a [u8]>,
    pub theirs: Option<&'a [u8]>,
}

/// A merge of a chunk's versions (`ChunkMerge::merge`).
pub type MergeChunk = fn(document: &[u8], key: &str, versions: ChunkVersions<'_>) -> Result<Option<Vec<u8>>>;

/// How a store that holds two writers' versions of a chunk at once (Icechunk, rebasing a commit
/// over another's) puts one writer's changes into the other's version: the format layer's
/// (`zarr::chunk_merge`), handed to the store by whoever opens it, as `ReadConsolidated` is.
#[derive(Clone, Copy, Debug)]
pub struct ChunkMerge {
    /// From the array's document and the chunk's key within the array (`c/0/1`): the chunk
    /// with this writer's changes from its base put into the other's version, `None` where
    /// that is all fill.
    pub merge: MergeChunk,
    /// Whether the array of document `after` is that of `before` only grown.
    pub grown_only: fn(before: &[u8], after: &[u8]) -> bool,
}

/// Resolve a byte range against a value's length into `start..end`.
pub(crate) fn resolve_range(key: &str, range: ByteRange, len: u64) -> Result<(u64, u64)> {
    let (start, end) = match range {
        ByteRange::Range { start, len: n } => (start, start.saturating_add(n)),
        ByteRange::Suffix(n) => (len.saturating_sub(n), len),
    };
    if end > len || (matches!(range, ByteRange::Suffix(n) if n > len)) {
        return Err(crate::Error::corrupt(key, format!("range {start}..{end} is past the end ({len} bytes)")));
    }
    Ok((start, end))
}
