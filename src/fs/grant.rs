//! Who other than the owner may read what through a shared mount (`allow_other`): the grant
//! of a node's directory and files, from the store's own permissions, and the check that each
//! value read for them lets them in too.

use crate::store::{self, Permissions, Store};
use crate::zarr::node::METADATA_DOCUMENTS;
use crate::{Error, Result};

/// What users other than the owner may do with a node when the mount is shared (allow_other):
/// the group and other permission bits of its directory and of its files. No more than the
/// store grants them: a directory needs search rights on it and every directory above it (its
/// own group's bits count only where a directory has the store root's group, which the mount
/// shows), and the files are readable where the node's document is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub dir: u16,
    pub file: u16,
}

impl Grant {
    /// A mount of the owner's alone (the kernel lets no one else in), or a store without
    /// permissions of its own (object storage, where allow_other shares what the credentials read).
    pub const OPEN: Grant = Grant { dir: 0o055, file: 0o044 };

    /// The grant of the node at `path` in a shared mount, from the store's own permissions.
    pub fn of(store: &dyn Store, shared: bool, path: &str) -> Result<Grant> {
        if !shared {
            return Ok(Grant::OPEN);
        }
        let Some(root) = store.permissions("")? else { return Ok(Grant::OPEN) };
        let classes = Classes(root.gid);
        let (mut group, mut other) = (7, 7);
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        for depth in 0..=parts.len() {
            let (g, o) = classes.of(store.permissions(&parts[..depth].join("/"))?);
            group &= g;
            other &= o;
        }
        // Every metadata document the node has (v2 keeps attributes apart) must be readable.
        let (mut dg, mut dother, mut found) = (7, 7, false);
        for name in METADATA_DOCUMENTS {
            if let Some(p) = store.permissions(&store::join(path, name))? {
                let (g, o) = classes.of(Some(p));
                (dg, dother, found) = (dg & g, dother & o, true);
            }
        }
        if !found {
            (dg, dother) = (0, 0);
        }
        // A file is read through its directory (x) and as its documents are (r).
        let readable = |dir: u32, doc: u32| if dir & 1 != 0 && doc & 4 != 0 { 4 } else { 0 };
        Ok(Grant { dir: (((group & 5) << 3) | (other & 5)) as u16, file: ((readable(group, dg) << 3) | readable(other, dother)) as u16 })
    }

    /// The grant of files made from several nodes (a group's views): what each admits.
    pub fn and(self, other: Grant) -> Grant {
        Grant { dir: self.dir & other.dir, file: self.file & other.file }
    }

    /// Whether the value at `key` of the node at `node` (a chunk, a shard) lets in everyone
    /// this grant lets read the node's files, as the store's own permissions say: each
    /// directory between the node's and the value searchable, the value readable, no link on
    /// the way (whom a link's target admits is not its own bits' say). Asked for every value a
    /// shared mount reads for others (a stat per directory below the node); the node's own
    /// directories and documents are the grant's.
    pub fn check_value(self, store: &dyn Store, node: &str, key: &str) -> Result<()> {
        let wanted = u32::from(self.file);
        if wanted == 0 {
            return Ok(());
        }
        let Some(root) = store.permissions("")? else { return Ok(()) };
        let classes = Classes(root.gid);
        let below = key.strip_prefix(node).unwrap_or(key).trim_start_matches('/');
        let (mut group, mut other) = (7, 7);
        let mut at = node.to_string();
        let parts: Vec<&str> = below.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            at = store::join(&at, part);
            let Some(p) = store.permissions(&at)? else { return Ok(()) };
            if p.link {
                return Err(Error::refused(key, "a link in a shared mount (not followed: its target's readers are not its own)"));
            }
            let (g, o) = classes.of(Some(p));
            // Directories are searched (x), the value read (r).
            let bit = if i + 1 == parts.len() { 4 } else { 1 };
            group &= if g & bit != 0 { 7 } else { 0 };
            other &= if o & bit != 0 { 7 } else { 0 };
        }
        let reach = ((group & 4) << 3) | (other & 4);
        if wanted & !reach != 0 {
            return Err(Error::refused(
                key,
                "readable by fewer users than its array's files: a shared mount serves it to no one (its mode, or a directory's above it, keeps others out)",
            ));
        }
        Ok(())
    }
}

/// The (group, other) rwx bits of a store entry, the group's counting only for the root's
/// group (`.0`, the group the mount shows); an absent entry or a link gives none.
struct Classes(u32);

impl Classes {
    fn of(&self, p: Option<Permissions>) -> (u32, u32) {
        match p {
            Some(p) if !p.link => (if p.gid == self.0 { (p.mode >> 3) & 7 } else { p.mode & 7 }, p.mode & 7),
            _ => (0, 0),
        }
    }
}
