//! An Icechunk repository as a store: the keys of one branch, tag or snapshot, read and
//! written through an Icechunk session (the `icechunk` crate). Writes go into the session,
//! which every read of this mount sees at once; `sync` (fsync, the close of a metadata
//! document, the unmount) commits the session to the branch, with a message naming the nodes
//! changed. A commit the branch has moved past is rebased on its tip: changes of other arrays
//! and chunks pass; a chunk both changed is merged, byte by byte (`ChunkMerge`); chunks of an
//! array the other writer only grew keep their places. Anything else (both changed one
//! document) fails the commit with EBUSY, and the session starts again at the tip, without
//! this mount's uncommitted changes, whose writers are told: a conflict never wedges a mount.
//! Mounts of one local repository commit one at a time (a lock on the repository directory),
//! as the local storage has no conditional update of a branch.
//!
//! Icechunk holds Zarr v3 with the default chunk keys (`c/0/1`); its chunk indices are not
//! negative, so an `offset`-encoded array cannot be prepended to here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures_util::TryStreamExt;
use icechunk::Repository;
use icechunk::change_set::ChangeSet;
use icechunk::config::Credentials;
use icechunk::conflicts::detector::ConflictDetector;
use icechunk::conflicts::{Conflict, ConflictResolution, ConflictSolver};
use icechunk::format::manifest::{ChunkPayload, ChunkRef};
use icechunk::format::transaction_log::TransactionLog;
use icechunk::format::{ByteRange as IcRange, ChunkIndices, SnapshotId};
use icechunk::repository::VersionInfo;
use icechunk::session::{Session, SessionError, SessionErrorKind, SessionResult};
use icechunk::storage::{S3Credentials, S3Options, Storage};
use icechunk::store::{ListDirItem, StoreError, StoreErrorKind};
use tokio::sync::RwLock;

use super::location::Reference;
use super::{
    ByteRange, ChunkMerge, ChunkVersions, Entry, Expect, Head, LocalStore, Location, RemoteLocation, RemoteOptions, Snapshot, Store, Value,
    Version, join,
};
use crate::error::lock;
use crate::{Error, Result};

pub struct IcechunkStore {
    runtime: tokio::runtime::Runtime,
    repo: Repository,
    session: Arc<RwLock<Session>>,
    store: icechunk::Store,
    reference: Reference,
    /// The path inside the repository that is mounted (`""`: all of it).
    root: String,
    versions: Mutex<Versions>,
    /// Chunks written beyond their array's shape, held until the array's grown document is
    /// written: zarrfs stores the chunks of a growth before the document that makes them part
    /// of the array (a crash between leaves them unseen), and Icechunk takes no chunk outside
    /// an array's grid. At most what one write-back stores; what no document takes in (a
    /// growth whose document failed) is not part of the array, and is never committed.
    beyond: Mutex<BTreeMap<String, bytes::Bytes>>,
    /// The repository's directory, when it is local: a native chunk is read from its chunk
    /// file with one `pread` (Icechunk's own read splits it in five, each streamed in 8 KiB
    /// reads through Tokio's blocking pool).
    chunk_files: Option<LocalStore>,
    /// How often a branch's tip is looked up (the metadata TTL), and when it last was.
    tip_ttl: std::time::Duration,
    tip_checked: Mutex<std::time::Instant>,
    /// How two writers' versions of a chunk are merged at a rebase.
    chunk_merge: Option<ChunkMerge>,
    /// The repository's directory, when it is local, opened to lock it around a commit.
    commit_lock: Option<std::fs::File>,
    /// Keys whose uncommitted changes a failed commit dropped (the session started again at
    /// the tip): the next sync of each fails with EBUSY, so that their writers are told.
    dropped: Mutex<BTreeSet<String>>,
}

/// A key's version is the count of changes seen when it last changed: this mount's writes,
/// and the changes of other writers a commit brought in. Keys not changed since are at the
/// floor (0, or the count when it was not known what other writers changed).
#[derive(Default)]
struct Versions {
    changes: u64,
    floor: u64,
    of: HashMap<String, u64>,
    /// Keys written since the last commit, for its message.
    uncommitted: BTreeSet<String>,
}

impl Versions {
    fn changed(&mut self, key: &str) {
        self.changes += 1;
        self.of.insert(key.to_string(), self.changes);
    }

    fn version(&self, key: &str) -> Version {
        Version([self.of.get(key).copied().unwrap_or(self.floor), 0, 0, 0, 0])
    }
}

/// A store error as the core's: an absent key is `None` (`Ok(None)` by the caller), a key
/// Icechunk cannot hold is refused, the rest is I/O.
fn failed(key: &str, e: StoreError) -> Error {
    match e.kind {
        StoreErrorKind::InvalidKey { .. } | StoreErrorKind::NotAllowed(_) => {
            Error::Unsupported(format!("{key}: an Icechunk repository holds Zarr v3 documents and chunk keys c/I/J with indices ≥ 0"))
        }
        StoreErrorKind::InvalidIndex { .. } => Error::refused(key, "outside the array's chunk grid"),
        // A virtual chunk, outside the repository: followed only when asked for.
        other if other.to_string().contains("authorize the virtual chunk container") => Error::refused(
            key,
            "a virtual chunk reference to a container outside the repository: mount with --virtual-chunks to follow it (or --targets PREFIX, for the containers beneath PREFIX)",
        ),
        other => Error::Io(std::io::Error::other(format!("{key}: {other}"))),
    }
}

/// Absent: no such node or chunk, a v2 document, or a name that is no Zarr v3 key.
fn is_absent(e: &StoreError) -> bool {
    matches!(e.kind, StoreErrorKind::NotFound(_) | StoreErrorKind::InvalidKey { .. })
}

/// Bytes read, and the version of the key they were read at.
type Versioned = (Vec<u8>, Version);

/// The node and chunk indices of a chunk key (`NODE/c/I/J`, `c/I`), as Icechunk reads it; `None`
/// for any other key (Icechunk's own read answers those, and words their errors).
fn chunk_address(key: &str) -> Option<(icechunk::format::Path, ChunkIndices)> {
    let (node, coords) = match key.rsplit_once("/c/") {
        Some(split) => split,
        None => ("", key.strip_prefix("c/")?),
    };
    let coords = coords.split('/').map(|i| i.parse().ok()).collect::<Option<Vec<u32>>>()?;
    Some((icechunk::format::Path::try_from(format!("/{node}").as_str()).ok()?, ChunkIndices(coords)))
}

/// A chunk key outside its array's grid.
fn outside_grid(e: &StoreError) -> bool {
    matches!(e.kind, StoreErrorKind::InvalidIndex { .. } | StoreErrorKind::SessionError(SessionErrorKind::InvalidIndex { .. }))
}

/// A commit that failed: a conflict another writer made is EBUSY with the conflicts named.
fn commit_failed(e: SessionError) -> Error {
    match e.kind {
        SessionErrorKind::RebaseFailed { snapshot, conflicts } => {
            let named: Vec<String> = conflicts.iter().take(5).map(|c| format!("{c:?}")).collect();
            Error::Busy(format!(
                "the commit conflicts with snapshot {snapshot} of another writer ({}{}); the branch is as that writer left it, and this mount's changes are kept uncommitted",
                named.join("; "),
                if conflicts.len() > 5 { format!("; {} more", conflicts.len() - 5) } else { String::new() }
            ))
        }
        // The branch moved again while this commit was rebased onto it, each time it tried.
        SessionErrorKind::Conflict { .. } => Error::Busy(format!(
            "other writers moved the branch while this commit was rebased onto it, each of the {REBASE_ATTEMPTS} times it tried: this mount's changes are kept uncommitted; try again"
        )),
        other => Error::Io(std::io::Error::other(format!("commit: {other}"))),
    }
}

/// Access to the virtual chunk containers the repository's configuration names that this
/// build can read: local files, S3 (with the credentials of the environment) and HTTP(S). With
/// `targets` (`--targets`), only containers that lie beneath one of them, as a reference
/// set's targets must.
fn virtual_chunk_access(config: &icechunk::RepositoryConfig, targets: &[String]) -> HashMap<String, Option<Credentials>> {
    let beneath = |prefix: &str, target: &str| {
        let target = match target.contains("://") {
            true => target.to_string(),
            false => format!("file://{}", std::path::Path::new(target).canonicalize().unwrap_or_else(|_| target.into()).display()),
        };
        let (prefix, target) = (prefix.trim_end_matches('/'), target.trim_end_matches('/'));
        prefix == target || prefix.strip_prefix(target).is_some_and(|rest| rest.starts_with('/'))
    };
    config
        .virtual_chunk_containers()
        .filter_map(|c| {
            let prefix = c.url_prefix();
            if !targets.is_empty() && !targets.iter().any(|t| beneath(prefix, t)) {
                return None;
            }
            let access = match prefix.split_once("://").map(|(scheme, _)| scheme) {
                Some("file") => Credentials::LocalFileSystemAccess,
                Some("s3") => Credentials::S3(S3Credentials::FromEnv),
                Some("http" | "https") => Credentials::HttpAccess,
                _ => return None,
            };
            Some((prefix.to_string(), Some(access)))
        })
        .collect()
}

fn icechunk_error(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl IcechunkStore {
    /// Open the repository at `repo` (a local directory or an S3 prefix) at `reference`.
    pub fn open(repo: &Location, reference: &Reference, root: &str, options: &RemoteOptions) -> std::result::Result<IcechunkStore, String> {
        let repo_location = repo;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("zarrfs-icechunk")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let (repo, session) = runtime.block_on(async {
            let storage: Arc<dyn Storage + Send + Sync> = match repo {
                Location::Local(path) => {
                    icechunk::new_local_filesystem_storage(path).await.map_err(|e| icechunk_error("repository", e.kind))?
                }
                Location::Remote(RemoteLocation::S3 { bucket, prefix }) => {
                    let endpoint = options.endpoint.clone().or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
                    let region = options
                        .region
                        .clone()
                        .or_else(|| std::env::var("AWS_REGION").ok())
                        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok());
                    // Non-exhaustive: set field by field.
                    let mut s3 = S3Options::default();
                    s3.region = region;
                    s3.allow_http = endpoint.as_deref().is_some_and(|e| e.starts_with("http://"));
                    s3.force_path_style = endpoint.is_some() && !options.virtual_hosted;
                    s3.endpoint_url = endpoint;
                    s3.anonymous = options.no_sign_request;
                    let credentials = if options.no_sign_request { S3Credentials::Anonymous } else { S3Credentials::FromEnv };
                    let prefix = (!prefix.is_empty()).then(|| prefix.clone());
                    icechunk::new_s3_object_store_storage(s3, bucket.clone(), prefix, Some(credentials), Vec::new(), Vec::new())
                        .await
                        .map_err(|e| icechunk_error("repository", e.kind))?
                }
                other => return Err(format!("{other}: an Icechunk repository is read from a local directory or from S3")),
            };
            let mut repository =
                Repository::open(storage).execute().await.map_err(|e| icechunk_error("not an Icechunk repository", e.kind))?;
            if options.virtual_chunks || !options.targets.is_empty() {
                repository = repository
                    .reopen(None, Some(virtual_chunk_access(repository.config(), &options.targets)))
                    .await
                    .map_err(|e| icechunk_error("virtual chunk containers", e.kind))?;
            }
            let session = match reference {
                Reference::Branch(b) => repository.writable_session(b).await,
                Reference::Tag(t) => repository.readonly_session(&VersionInfo::TagRef(t.clone())).await,
                Reference::Snapshot(s) => {
                    let id = SnapshotId::try_from(s.as_str()).map_err(|e| format!("snapshot {s}: {e}"))?;
                    repository.readonly_session(&VersionInfo::SnapshotId(id)).await
                }
            }
            .map_err(|e| icechunk_error(&reference.to_string(), e.kind))?;
            Ok::<_, String>((repository, session))
        })?;
        // Opened once the repository is known to be one: what is not says so in Icechunk's words.
        // Where the directory cannot be opened here, Icechunk's own reads still serve.
        let (chunk_files, commit_lock) = match repo_location {
            Location::Local(path) => (LocalStore::open(path).ok(), std::fs::File::open(path).ok()),
            _ => (None, None),
        };
        let session = Arc::new(RwLock::new(session));
        let store = runtime.block_on(icechunk::Store::from_session(session.clone()));
        Ok(IcechunkStore {
            runtime,
            repo,
            session,
            store,
            reference: reference.clone(),
            root: root.trim_matches('/').to_string(),
            versions: Mutex::default(),
            beyond: Mutex::default(),
            chunk_files,
            tip_ttl: options.metadata_ttl,
            tip_checked: Mutex::new(std::time::Instant::now()),
            chunk_merge: options.chunk_merge,
            commit_lock,
            dropped: Mutex::default(),
        })
    }

    fn key(&self, key: &str) -> String {
        join(&self.root, key)
    }

    fn refuse_writes(&self) -> Result<()> {
        if self.reference.read_only() { Err(Error::ReadOnly) } else { Ok(()) }
    }

    /// The bytes `range` of the chunk at `key`, read from its chunk file with one `pread` or
    /// from the manifest (an inline chunk). `None` where this cannot
    /// answer (not a chunk key, a chunk held beyond its array's shape, a virtual chunk, a
    /// repository not on a local disk, an error Icechunk's own read words better).
    /// `range` `None` is the whole chunk, refused past `max` bytes.
    fn read_chunk(&self, key: &str, range: Option<ByteRange>, max: u64) -> Option<Result<Option<Versioned>>> {
        let files = self.chunk_files.as_ref()?;
        let (node, coords) = chunk_address(&self.key(key))?;
        // The version first: a write between the two leaves an older version, which is safe.
        let version = lock(&self.versions).version(key);
        if lock(&self.beyond).contains_key(key) {
            return None;
        }
        let payload = self.runtime.block_on(async { self.session.read().await.get_chunk_ref(&node, &coords).await }).ok()?;
        let (start, end, len) = match &payload {
            None => return Some(Ok(None)),
            Some(ChunkPayload::Virtual(_)) => return None,
            Some(p) => {
                let len = p.length();
                match range.map_or(Ok((0, len)), |range| super::resolve_range(key, range, len)) {
                    Ok((start, end)) if end - start <= max => (start, end, len),
                    Ok(_) => return Some(Err(Error::refused(key, format!("{len} bytes, more than the {max} it can hold (not read)")))),
                    Err(e) => return Some(Err(e)),
                }
            }
        };
        Some(match payload {
            Some(ChunkPayload::Inline(bytes)) => match bytes.get(start as usize..end as usize) {
                Some(bytes) => Ok(Some((bytes.to_vec(), version))),
                None => Err(Error::corrupt(key, format!("an inline chunk of {} bytes, not the {len} its manifest says", bytes.len()))),
            },
            Some(ChunkPayload::Ref(ChunkRef { id, offset, .. })) => {
                let file = format!("chunks/{id}");
                let Some(at) = offset.checked_add(start) else {
                    return Some(Err(Error::corrupt(key, format!("its manifest places it at offset {offset}, past any file"))));
                };
                match files.get_range(&file, ByteRange::Range { start: at, len: end - start }) {
                    Ok(Some(bytes)) => Ok(Some((bytes, version))),
                    Ok(None) => Err(Error::corrupt(key, format!("its chunk file {file} is missing from the repository"))),
                    Err(e) => Err(e),
                }
            }
            _ => return None,
        })
    }

    fn size(&self, key: &str) -> Result<Option<u64>> {
        if let Some(held) = lock(&self.beyond).get(key) {
            return Ok(Some(held.len() as u64));
        }
        match self.runtime.block_on(self.store.getsize(&self.key(key))) {
            // Icechunk gives a chunk never written a size of 0: whether it is there is asked.
            Ok(0) => match self.runtime.block_on(self.store.exists(&self.key(key))) {
                Ok(true) => Ok(Some(0)),
                Ok(false) => Ok(None),
                Err(e) if is_absent(&e) => Ok(None),
                Err(e) => Err(failed(key, e)),
            },
            Ok(n) => Ok(Some(n)),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(failed(key, e)),
        }
    }

    fn read(&self, key: &str, range: IcRange) -> Result<Option<(Vec<u8>, Version)>> {
        // The version first: a write between the two leaves an older version, which is safe.
        let version = lock(&self.versions).version(key);
        if let Some(held) = lock(&self.beyond).get(key) {
            let IcRange::Bounded(r) = range else { return Ok(Some((held.to_vec(), version))) };
            return Ok(held.get(r.start as usize..r.end as usize).map(|b| (b.to_vec(), version)));
        }
        match self.runtime.block_on(self.store.get(&self.key(key), &range)) {
            Ok(bytes) => Ok(Some((bytes.to_vec(), version))),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(failed(key, e)),
        }
    }

    /// Store the chunks of `node` held beyond its shape that its document now takes in.
    fn store_held_chunks(&self, node: &str) -> Result<()> {
        let lead = if node.is_empty() { "c/".to_string() } else { format!("{node}/c/") };
        let held: Vec<(String, bytes::Bytes)> =
            lock(&self.beyond).iter().filter(|(k, _)| k.starts_with(&lead)).map(|(k, v)| (k.clone(), v.clone())).collect();
        for (key, value) in held {
            match self.runtime.block_on(self.store.set(&self.key(&key), value)) {
                Ok(()) => {
                    lock(&self.beyond).remove(&key);
                }
                Err(e) if outside_grid(&e) => {}
                Err(e) => return Err(failed(&key, e)),
            }
        }
        Ok(())
    }

    /// Commit the session to the branch, rebasing over other writers' commits (`MergingSolver`).
    /// The message names the nodes changed. `syncing`: the keys whose writers this commit's
    /// error reaches.
    fn commit(&self, syncing: &[String]) -> Result<()> {
        let Reference::Branch(branch) = &self.reference else { return Ok(()) };
        let uncommitted = std::mem::take(&mut lock(&self.versions).uncommitted);
        let message = commit_message(&uncommitted);
        // One commit at a time among the mounts of a local repository: its branch is read and
        // moved in one step then. Another program's lock is waited for a while only.
        let _one_at_a_time = self.lock_commits()?;
        let result = self.runtime.block_on(async {
            let mut session = self.session.write().await;
            if !session.has_uncommitted_changes() {
                return Ok(None);
            }
            let base = session.snapshot_id().clone();
            let solver = MergingSolver { repo: &self.repo, merge: self.chunk_merge };
            let committed = match session
                .commit(message.clone())
                .rebase(&solver, REBASE_ATTEMPTS)
                .before_rebase_hook(Box::new(|attempt| Box::pin(tokio::time::sleep(rebase_pause(attempt)))))
                .execute()
                .await
            {
                Ok(committed) => committed,
                Err(e) => {
                    let unsolvable = matches!(e.kind, SessionErrorKind::RebaseFailed { .. });
                    let error = commit_failed(e);
                    // What cannot be merged is not kept to fail every later commit: the
                    // session starts again at the tip, and the writers of what it held are told.
                    if unsolvable {
                        *session = self
                            .repo
                            .writable_session(branch)
                            .await
                            .map_err(|e| (Error::Io(std::io::Error::other(format!("a new session on branch {branch}: {e}"))), None))?;
                        return Err((error, Some(session.snapshot_id().clone())));
                    }
                    return Err((error, None));
                }
            };
            // A committed session takes no more changes: the next ones go into a new one, at
            // the branch's tip (this commit, or what others committed since).
            *session = self
                .repo
                .writable_session(branch)
                .await
                .map_err(|e| (Error::Io(std::io::Error::other(format!("a new session on branch {branch}: {e}"))), None))?;
            Ok::<_, (Error, Option<SnapshotId>)>(Some((base, committed, session.snapshot_id().clone())))
        });
        match result {
            Ok(None) => Ok(()),
            Ok(Some((base, committed, tip))) => {
                tracing::info!(branch = %branch, snapshot = %committed, "committed: {message}");
                if let Some(parent) = self.parent(&committed).filter(|p| *p != base) {
                    self.note_others_changes(&base, &parent);
                }
                if tip != committed {
                    self.note_others_changes(&committed, &tip);
                }
                Ok(())
            }
            Err((e, Some(tip))) => {
                tracing::warn!(branch = %branch, tip = %tip, "commit refused, its changes dropped (their writers are told): {e}");
                lock(&self.beyond).clear();
                // The sync that failed tells the writers of its own keys; the others are told
                // at their next sync.
                lock(&self.dropped).extend(uncommitted.into_iter().filter(|k| !syncing.contains(k)));
                // Not known what of the session went: everything is read again.
                let mut versions = lock(&self.versions);
                versions.changes += 1;
                versions.floor = versions.changes;
                versions.of.clear();
                Err(e)
            }
            Err((e, None)) => {
                lock(&self.versions).uncommitted.extend(uncommitted);
                tracing::warn!(branch = %branch, "commit failed: {e}");
                Err(e)
            }
        }
    }

    /// The lock of a local repository's commits, held: an exclusive `flock` on its directory
    /// (nothing is written there for it), waited for 60 s at most.
    fn lock_commits(&self) -> Result<Option<CommitLock<'_>>> {
        let Some(dir) = &self.commit_lock else { return Ok(None) };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            match rustix::fs::flock(dir, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Some(CommitLock(dir))),
                Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(Error::Busy(
                        "another process has held the repository's commit lock (a flock of its directory) for 60 s".into(),
                    ));
                }
                // A file system without such locks: commits are not serialized there, as
                // Icechunk's own warning (not shown: zarrfs serializes them elsewhere) would say.
                Err(e) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::warn!("the repository's directory takes no flock ({e}): commits of two processes at once may conflict")
                    });
                    return Ok(None);
                }
            }
        }
    }

    /// Follow a branch mounted: at most once a metadata TTL its tip is looked up, and a session
    /// with nothing uncommitted moves to it when other writers committed since; what they
    /// changed gets new versions, so that nothing cached of it is served again. A session with
    /// changes of its own stays where it is until it commits (which rebases onto the tip).
    fn follow_branch(&self) {
        let Reference::Branch(branch) = &self.reference else { return };
        {
            let mut checked = lock(&self.tip_checked);
            if checked.elapsed() < self.tip_ttl {
                return;
            }
            *checked = std::time::Instant::now();
        }
        let moved = self.runtime.block_on(async {
            let tip = self.repo.lookup_branch(branch).await.map_err(|e| format!("the tip of branch {branch}: {}", e.kind))?;
            let mut session = self.session.write().await;
            if session.has_uncommitted_changes() || *session.snapshot_id() == tip {
                return Ok(None);
            }
            let from = session.snapshot_id().clone();
            *session = self.repo.writable_session(branch).await.map_err(|e| format!("a new session on branch {branch}: {}", e.kind))?;
            Ok::<_, String>(Some((from, session.snapshot_id().clone())))
        });
        match moved {
            Ok(Some((from, to))) => {
                tracing::info!(branch = %branch, from = %from, to = %to, "following the branch: other writers committed");
                self.note_others_changes(&from, &to);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("{e}"),
        }
    }

    /// The snapshot `id` was made on.
    fn parent(&self, id: &SnapshotId) -> Option<SnapshotId> {
        self.runtime.block_on(async {
            let ancestry = self.repo.ancestry(&VersionInfo::SnapshotId(id.clone())).await.ok()?;
            let mut ancestry = std::pin::pin!(ancestry);
            ancestry.try_next().await.ok()?.and_then(|info| info.parent_id)
        })
    }

    /// What other writers committed between snapshots `from` and `to` gets new versions, so
    /// that nothing cached of it is taken for what is stored.
    fn note_others_changes(&self, from: &SnapshotId, to: &SnapshotId) {
        let diff = self.runtime.block_on(self.repo.diff(&VersionInfo::SnapshotId(from.clone()), &VersionInfo::SnapshotId(to.clone())));
        let mut versions = lock(&self.versions);
        let Ok(diff) = diff else {
            // Not known what changed: everything may have.
            versions.changes += 1;
            versions.floor = versions.changes;
            versions.of.clear();
            tracing::warn!("the changes of other writers since {from} are not known: everything cached is read again");
            return;
        };
        let unrooted = |path: &icechunk::format::Path| path.to_string().trim_start_matches('/').to_string();
        let documents = diff
            .new_groups
            .iter()
            .chain(&diff.new_arrays)
            .chain(&diff.deleted_groups)
            .chain(&diff.deleted_arrays)
            .chain(&diff.updated_groups)
            .chain(&diff.updated_arrays)
            .map(|p| join(&unrooted(p), "zarr.json"));
        let chunks = diff.updated_chunks.iter().flat_map(|(p, chunks)| {
            let node = unrooted(p);
            chunks.iter().map(move |c| {
                let coords: Vec<String> = c.0.iter().map(u32::to_string).collect();
                join(&node, &format!("c/{}", coords.join("/")))
            })
        });
        let lead = if self.root.is_empty() { String::new() } else { format!("{}/", self.root) };
        for key in documents.chain(chunks) {
            if let Some(key) = key.strip_prefix(&lead) {
                versions.changed(key);
            }
        }
    }
}

/// How many times a commit is rebased onto a branch other writers keep moving before it fails
/// with EBUSY (its changes kept).
const REBASE_ATTEMPTS: u16 = 30;

/// The pause before rebase attempt `attempt`: growing (5 ms, doubling, at most 0.5 s), and
/// jittered, so that writers that keep moving one branch on object storage (where commits are
/// not serialized) fall out of step rather than collide on every attempt.
fn rebase_pause(attempt: u16) -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut jitter = std::collections::hash_map::RandomState::new().build_hasher();
    jitter.write_u16(attempt);
    let base = (5u64 << attempt.min(7)).min(500);
    std::time::Duration::from_millis(base / 2 + jitter.finish() % base.max(1))
}

/// The commit lock of a local repository, released when dropped.
struct CommitLock<'a>(&'a std::fs::File);

impl Drop for CommitLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, rustix::fs::FlockOperation::Unlock);
    }
}

/// Rebases this mount's changes over another writer's commit. Icechunk's detector finds the
/// conflicts; those zarrfs can solve are solved: a chunk both changed is merged (`ChunkMerge`),
/// chunks of an array the other writer only grew keep their places. Anything else fails.
struct MergingSolver<'a> {
    repo: &'a Repository,
    merge: Option<ChunkMerge>,
}

/// The bytes of a chunk as `session` holds it (`None`: absent).
/// The bytes of a chunk as `session` holds it (`Some(None)`: absent), or `None` where its
/// manifest gives it more bytes than a chunk may have (`--max-chunk-size`): another writer's
/// manifest says how much would be read, and it is not read then.
async fn chunk_in(session: &Session, path: &icechunk::format::Path, coords: &ChunkIndices) -> SessionResult<Option<Option<bytes::Bytes>>> {
    let len = match session.get_chunk_ref(path, coords).await? {
        Some(ChunkPayload::Ref(ChunkRef { length, .. })) => length,
        Some(ChunkPayload::Inline(bytes)) => bytes.len() as u64,
        Some(ChunkPayload::Virtual(v)) => v.length,
        Some(_) => return Ok(None),
        None => return Ok(Some(None)),
    };
    if len > crate::limits::max_chunk_bytes() {
        return Ok(None);
    }
    match session.get_chunk_reader(path, coords, &IcRange::ALL).await? {
        Some(read) => Ok(Some(Some(read.await?))),
        None => Ok(Some(None)),
    }
}

impl MergingSolver<'_> {
    /// The bytes of a chunk this mount changed (`payload`: `None` deleted).
    async fn our_chunk(
        &self,
        path: &icechunk::format::Path,
        coords: &ChunkIndices,
        payload: &Option<ChunkPayload>,
    ) -> Option<Option<bytes::Bytes>> {
        match payload {
            None => Some(None),
            Some(ChunkPayload::Inline(bytes)) => Some(Some(bytes.clone())),
            Some(ChunkPayload::Ref(ChunkRef { id, offset, length })) => {
                let range = *offset..offset.checked_add(*length)?;
                self.repo.asset_manager().fetch_chunk(&path.to_string(), &coords.0, id, &range).await.ok().map(Some)
            }
            // Not a chunk zarrfs writes.
            Some(_) => None,
        }
    }

    /// Merge the chunks both changed of the array at `path`: `Ok(false)` where one cannot be.
    async fn merge_chunks(
        &self,
        merge: ChunkMerge,
        (path, node_id, coords): (&icechunk::format::Path, &icechunk::format::NodeId, &std::collections::HashSet<ChunkIndices>),
        theirs: &Session,
        ours: &Session,
        changes: &mut ChangeSet,
    ) -> SessionResult<bool> {
        let document = theirs.get_node(path).await?.user_data;
        for c in coords {
            let Some(payload) = changes.get_chunk_ref(node_id, c).cloned() else { continue };
            let Some(our) = self.our_chunk(path, c, &payload).await else { return Ok(false) };
            // While solving, `ours` holds none of this mount's changes: its chunk is the base.
            let key = format!("c/{}", c.0.iter().map(u32::to_string).collect::<Vec<_>>().join("/"));
            let (Some(base), Some(their)) = (chunk_in(ours, path, c).await?, chunk_in(theirs, path, c).await?) else {
                tracing::warn!(array = %path, key, "not merged: a version of the chunk is larger than a chunk may be (--max-chunk-size)");
                return Ok(false);
            };
            let versions = ChunkVersions { base: base.as_deref(), ours: our.as_deref(), theirs: their.as_deref() };
            let merged = match (merge.merge)(&document, &key, versions) {
                Ok(merged) => merged,
                Err(e) => {
                    tracing::warn!(array = %path, key, "not merged: {e}");
                    return Ok(false);
                }
            };
            let payload = match merged {
                Some(bytes) => Some(ours.get_chunk_writer(path, c)?(bytes::Bytes::from(bytes)).await?),
                None => None,
            };
            changes.set_chunk_ref(node_id.clone(), c.clone(), payload)?;
            tracing::debug!(array = %path, key, "merged with another writer's commit");
        }
        Ok(true)
    }
}

#[async_trait::async_trait]
impl ConflictSolver for MergingSolver<'_> {
    async fn solve(
        &self,
        previous_change: &TransactionLog,
        theirs: &Session,
        changes: ChangeSet,
        ours: &Session,
    ) -> SessionResult<ConflictResolution> {
        let (reason, mut changes, merge) = match (ConflictDetector.solve(previous_change, theirs, changes, ours).await?, self.merge) {
            (ConflictResolution::Unsolvable { reason, unmodified }, Some(merge)) => (reason, unmodified, merge),
            (found, _) => return Ok(found),
        };
        let mut solved = true;
        for conflict in &reason {
            solved &= match conflict {
                Conflict::ChunkDoubleUpdate { path, node_id, chunk_coordinates } => {
                    self.merge_chunks(merge, (path, node_id, chunk_coordinates), theirs, ours, &mut changes).await?
                }
                Conflict::ChunksUpdatedInUpdatedArray { path, .. } => {
                    let (before, after) = (ours.get_node(path).await?.user_data, theirs.get_node(path).await?.user_data);
                    (merge.grown_only)(&before, &after)
                }
                _ => false,
            };
            if !solved {
                break;
            }
        }
        Ok(if solved { ConflictResolution::Patched(changes) } else { ConflictResolution::Unsolvable { reason, unmodified: changes } })
    }
}

/// "zarrfs: a (2 chunks, zarr.json), g/b (zarr.json)": the nodes changed, with what of them.
fn commit_message(keys: &BTreeSet<String>) -> String {
    let mut nodes: Vec<(String, u64, bool)> = Vec::new();
    for key in keys {
        let (node, document) = match key.rsplit_once('/') {
            _ if key == "zarr.json" => (String::new(), true),
            Some((node, "zarr.json")) => (node.to_string(), true),
            _ => match key.find("/c/").map(|i| &key[..i]).or_else(|| key.strip_prefix("c/").map(|_| "")) {
                Some(node) => (node.to_string(), false),
                None => (key.clone(), false),
            },
        };
        match nodes.iter_mut().find(|n| n.0 == node) {
            Some(n) => {
                n.1 += u64::from(!document);
                n.2 |= document;
            }
            None => nodes.push((node, u64::from(!document), document)),
        }
    }
    let shown: Vec<String> = nodes
        .iter()
        .take(10)
        .map(|(node, chunks, document)| {
            let what: Vec<String> = [
                (*chunks > 0).then(|| format!("{chunks} chunk{}", if *chunks == 1 { "" } else { "s" })),
                document.then(|| "zarr.json".to_string()),
            ]
            .into_iter()
            .flatten()
            .collect();
            format!("{} ({})", if node.is_empty() { "/" } else { node }, what.join(", "))
        })
        .collect();
    let more = if nodes.len() > 10 { format!(" and {} more nodes", nodes.len() - 10) } else { String::new() };
    if shown.is_empty() { "zarrfs: changes".to_string() } else { format!("zarrfs: {}{more}", shown.join(", ")) }
}

impl Store for IcechunkStore {
    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>> {
        self.follow_branch();
        if let Some(read) = self.read_chunk(key, None, max) {
            return Ok(read?.map(|(bytes, version)| Value { bytes, version }));
        }
        let Some(len) = self.size(key)? else { return Ok(None) };
        if len > max {
            return Err(Error::refused(key, format!("{len} bytes, more than the {max} it can hold (not read)")));
        }
        Ok(self.read(key, IcRange::ALL)?.map(|(bytes, version)| Value { bytes, version }))
    }

    fn prepend_refusal(&self) -> Option<&'static str> {
        Some("an Icechunk repository holds chunk keys with indices ≥ 0 only, so rows cannot go in front")
    }

    fn head(&self, key: &str) -> Result<Option<Head>> {
        self.follow_branch();
        let version = lock(&self.versions).version(key);
        Ok(self.size(key)?.map(|len| Head { len, version }))
    }

    fn get_range_versioned(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        self.follow_branch();
        if let Some(read) = self.read_chunk(key, Some(range), u64::MAX) {
            return read;
        }
        let Some(len) = self.size(key)? else { return Ok(None) };
        let (start, end) = super::resolve_range(key, range, len)?;
        self.read(key, IcRange::Bounded(start..end))
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<Version> {
        self.refuse_writes()?;
        let value = bytes::Bytes::copy_from_slice(value);
        let node = (key == "zarr.json").then_some("").or_else(|| key.strip_suffix("/zarr.json"));
        let mut stored = self.runtime.block_on(self.store.set(&self.key(key), value.clone()));
        if let (Err(e), Some(node)) = (&stored, node)
            && matches!(e.kind, StoreErrorKind::SessionError(SessionErrorKind::AlreadyExists { .. }))
        {
            // A node of the other kind is there (a group becoming an array): Icechunk replaces a
            // node as a whole, and only one that holds no nodes.
            if self.list_dir(node)?.iter().any(|e| e.name != "zarr.json" && e.name != "c") {
                return Err(Error::NotEmpty);
            }
            self.runtime.block_on(self.store.delete_dir(&self.key(node))).map_err(|e| failed(key, e))?;
            stored = self.runtime.block_on(self.store.set(&self.key(key), value.clone()));
        }
        match stored {
            Ok(()) => {}
            Err(e) if outside_grid(&e) => {
                lock(&self.beyond).insert(key.to_string(), value);
            }
            Err(e) => return Err(failed(key, e)),
        }
        if let Some(node) = node {
            self.store_held_chunks(node)?;
        }
        lock(&self.dropped).remove(key);
        let mut versions = lock(&self.versions);
        versions.changed(key);
        versions.uncommitted.insert(key.to_string());
        Ok(versions.version(key))
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.refuse_writes()?;
        lock(&self.beyond).remove(key);
        match self.runtime.block_on(self.store.delete(&self.key(key))) {
            Ok(()) => {}
            // Outside the array's grid (it shrank): not part of the array any more.
            Err(e) if is_absent(&e) || outside_grid(&e) => return Ok(()),
            Err(e) => return Err(failed(key, e)),
        }
        lock(&self.dropped).remove(key);
        let mut versions = lock(&self.versions);
        versions.changed(key);
        versions.uncommitted.insert(key.to_string());
        Ok(())
    }

    /// Checked against this session's own changes: other writers' are arbitrated when the
    /// session commits (`sync`), which rebases onto theirs or fails naming the conflict.
    fn set_if(&self, key: &str, value: &[u8], expect: Expect) -> Result<Version> {
        if !expect.holds(self.head(key)?.map(|h| h.version)) {
            return Err(Error::conflict(key, "changed in this session since it was read"));
        }
        self.set(key, value)
    }

    fn delete_if(&self, key: &str, expect: Expect) -> Result<()> {
        if !expect.holds(self.head(key)?.map(|h| h.version)) {
            return Err(Error::conflict(key, "changed in this session since it was read"));
        }
        self.delete(key)
    }

    fn arbitrates_commits(&self) -> bool {
        true
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        self.follow_branch();
        let listed = self.runtime.block_on(async {
            let mut items = self.store.list_dir_items(&self.key(prefix)).await?;
            let mut out = Vec::new();
            while let Some(item) = items.try_next().await? {
                out.push(match item {
                    ListDirItem::Key(name) => Entry { name, is_dir: false },
                    ListDirItem::Prefix(name) => Entry { name, is_dir: true },
                });
            }
            Ok::<_, StoreError>(out)
        });
        listed.map_err(|e| failed(prefix, e))
    }

    /// Deleting a node's keys one by one leaves it in Icechunk's tree: the node goes as one.
    fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        self.refuse_writes()?;
        self.runtime.block_on(self.store.delete_dir(&self.key(prefix))).map_err(|e| failed(prefix, e))?;
        let mut versions = lock(&self.versions);
        versions.changed(&join(prefix, "zarr.json"));
        versions.uncommitted.insert(join(prefix, "zarr.json"));
        Ok(1)
    }

    /// The keys written are in the session; making them durable is committing it.
    /// Nothing to hold: a commit rebases onto other writers' or fails (`arbitrates_commits`).
    fn hold_lock(self: Arc<Self>, _key: &str, _wait: std::time::Duration) -> Result<super::Held> {
        Ok(super::Held::new(()))
    }

    fn sync(&self, keys: &[String]) -> Result<()> {
        self.commit(keys)?;
        let mut dropped = lock(&self.dropped);
        let lost: Vec<&String> = keys.iter().filter(|k| dropped.contains(*k)).collect();
        if lost.is_empty() {
            return Ok(());
        }
        let first = lost[0].clone();
        for key in keys {
            dropped.remove(key);
        }
        Err(Error::Busy(format!("{first}: dropped uncommitted when another writer's commit conflicted with this mount's; write it again")))
    }

    fn reach(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn history(&self) -> Result<Option<Vec<Snapshot>>> {
        let from = VersionInfo::SnapshotId(self.runtime.block_on(self.session.read()).snapshot_id().clone());
        let snapshots = self.runtime.block_on(async {
            let ancestry = self.repo.ancestry(&from).await?;
            let mut ancestry = std::pin::pin!(ancestry);
            let mut out = Vec::new();
            while let Some(info) = ancestry.try_next().await? {
                out.push(Snapshot { id: info.id.to_string(), made: info.flushed_at.to_rfc3339(), message: info.message });
            }
            Ok::<_, icechunk::repository::RepositoryError>(out)
        });
        snapshots.map(Some).map_err(|e| Error::Io(std::io::Error::other(format!("history: {}", e.kind))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_keys_are_read_as_icechunk_reads_them_and_other_keys_are_left_to_it() {
        let address = |key: &str| chunk_address(key).map(|(node, coords)| (node.to_string(), coords.0));
        assert_eq!(address("a/b/c/0/12"), Some(("/a/b".into(), vec![0, 12])));
        assert_eq!(address("c/3"), Some(("/".into(), vec![3])));
        // A node named c: the last `/c/` marks the chunk indices.
        assert_eq!(address("c/c/1"), Some(("/c".into(), vec![1])));
        for other in ["zarr.json", "a/zarr.json", "a/c/zarr.json", "a/c/-1", "a/c/0/x", "c", "a/c", "a/c/99999999999"] {
            assert_eq!(address(other), None, "{other}");
        }
    }

    #[test]
    fn commit_messages_name_nodes_and_what_of_them_changed() {
        let keys: BTreeSet<String> =
            ["a/c/0/0", "a/c/1/0", "a/zarr.json", "g/b/zarr.json", "zarr.json", "c/0"].iter().map(|s| s.to_string()).collect();
        assert_eq!(commit_message(&keys), "zarrfs: a (2 chunks, zarr.json), / (1 chunk, zarr.json), g/b (zarr.json)");
    }
}
