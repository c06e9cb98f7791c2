//! A zip archive as a read-only store: zarr-python's `ZipStore` and zipped OME-Zarr (`.ozx`,
//! OME RFC-9). The archive is a value of another store (a local directory, a bucket, an HTTP
//! server) and is read by ranges: its central directory once, when it is opened, then each
//! entry where it lies, so a remote archive is never fetched whole and a shard's inner chunks
//! are read by their own ranges when the entry is stored (not compressed).
//!
//! zarr-python rewrites a key by appending another entry of the same name: the last one in
//! the central directory is served. Whole reads check the entry's CRC-32; an archive that
//! changes while it is mounted fails its reads (remount to see the new one).

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, OnceLock};

use super::{ByteRange, Entry, Head, Permissions, Store, Usage, Value, Version, resolve_range};
use crate::{Error, Result};

/// The largest central directory read (some three million entries, each held in memory at
/// some 150 bytes): an archive may be hostile. RFC-9 archives are sharded: far fewer entries.
const MAX_DIRECTORY: u64 = 256 << 20;
/// The largest compressed entry inflated to serve part of it (a stored entry is read by ranges).
const MAX_INFLATED: u64 = 4 << 30;

const LOCAL_HEADER: u32 = 0x0403_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END: u32 = 0x0605_4b50;
const END64: u32 = 0x0606_4b50;
const END64_LOCATOR: u32 = 0x0706_4b50;
/// The size of the end record without its comment, and the most a comment can add.
const END_LEN: usize = 22;
const MAX_COMMENT: usize = 0xffff;

/// How an entry's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Stored,
    Deflated,
}

#[derive(Debug)]
struct ZipEntry {
    /// `None`: encrypted, or compressed by a method this store cannot inflate.
    method: Option<Method>,
    crc: u32,
    compressed: u64,
    size: u64,
    /// Where its local header starts.
    header: u64,
    /// Where its bytes start (after the local header, whose name and extra field may differ
    /// in length from the central directory's): known once the local header was read.
    data: OnceLock<u64>,
}

pub struct ZipStore {
    container: Arc<dyn Store>,
    archive: String,
    /// The archive as it was opened: a read of another version is refused.
    version: Version,
    len: u64,
    files: HashMap<String, ZipEntry>,
    dirs: super::key_tree::KeyTree,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Where the end record starts in `tail`: the last signature whose comment ends the archive,
/// else (unless `exact`) the last one at all (bytes appended after an archive).
fn find_end(tail: &[u8], exact: bool) -> Option<usize> {
    let candidates = (0..=tail.len().checked_sub(END_LEN)?).rev().filter(|&i| u32_at(tail, i) == Some(END));
    let mut last = None;
    for i in candidates {
        if i + END_LEN + usize::from(u16_at(tail, i + 20)?) == tail.len() {
            return Some(i);
        }
        last = last.or(Some(i));
    }
    last.filter(|_| !exact)
}

/// A key an archive entry can stand for: relative, no empty, `.` or `..` parts.
fn entry_key(name: &str) -> Option<&str> {
    let name = name.strip_prefix("./").unwrap_or(name);
    let ok = !name.is_empty() && !name.starts_with('/') && name.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
    ok.then_some(name)
}

impl ZipStore {
    /// Open the archive `archive` of `container`, reading its central directory. Only the
    /// entries under `root` (a path inside the archive, `""` for all) are served, as keys
    /// relative to it.
    pub fn open(container: Arc<dyn Store>, archive: &str, root: &str) -> Result<ZipStore> {
        let head = container.head(archive)?.ok_or_else(|| Error::refused(archive, "no such archive"))?;
        let (len, version) = (head.len, head.version);
        let bad = |why: &str| Error::corrupt(archive, format!("not a zip archive: {why}"));
        let read = |start: u64, n: u64| -> Result<Vec<u8>> {
            let (bytes, v) = container
                .get_range_versioned(archive, ByteRange::Range { start, len: n })?
                .ok_or_else(|| Error::refused(archive, "removed while it was opened"))?;
            if v != version {
                return Err(Error::Stale(format!("{archive} changed while it was opened")));
            }
            Ok(bytes)
        };
        // The end record, and the ZIP64 locator before it: in the last kibibytes unless a long
        // comment follows, which a second read of the most a comment can be finds.
        let mut tail_len = len.min(4096);
        let mut tail = read(len - tail_len, tail_len)?;
        let mut at = find_end(&tail, tail_len < len);
        if at.is_none() && tail_len < len {
            tail_len = len.min((END_LEN + MAX_COMMENT + 20) as u64);
            tail = read(len - tail_len, tail_len)?;
            at = find_end(&tail, false);
        }
        let at = at.ok_or_else(|| bad("no end of central directory record"))?;
        let end_offset = len - tail_len + at as u64;
        let field = |f: Option<u64>| f.ok_or_else(|| bad("a truncated end record"));
        let mut entries = field(u16_at(&tail, at + 10).map(u64::from))?;
        let mut dir_len = field(u32_at(&tail, at + 12).map(u64::from))?;
        let mut dir_start = field(u32_at(&tail, at + 16).map(u64::from))?;
        let mut dir_end = end_offset;
        if entries == 0xffff || dir_len == 0xffff_ffff || dir_start == 0xffff_ffff {
            // ZIP64: a locator just before the end record says where the ZIP64 end record is.
            let locator = at.checked_sub(20).filter(|&l| u32_at(&tail, l) == Some(END64_LOCATOR));
            let locator = locator.ok_or_else(|| bad("a ZIP64 archive without its ZIP64 locator"))?;
            let end64 = field(u64_at(&tail, locator + 8))?;
            if end64.checked_add(56).is_none_or(|e| e > end_offset) {
                return Err(bad("the ZIP64 end record lies outside the archive"));
            }
            let record = read(end64, 56)?;
            if u32_at(&record, 0) != Some(END64) {
                return Err(bad("no ZIP64 end record where its locator points"));
            }
            entries = field(u64_at(&record, 32))?;
            dir_len = field(u64_at(&record, 40))?;
            dir_start = field(u64_at(&record, 48))?;
            dir_end = end64;
        }
        if dir_len > MAX_DIRECTORY {
            return Err(Error::refused(archive, format!("a central directory of {dir_len} bytes (at most {MAX_DIRECTORY} are read)")));
        }
        // Bytes before the archive (a self-extracting stub, or an archive appended to another
        // file) shift every offset by as much.
        let shift =
            dir_end.checked_sub(dir_len).and_then(|s| s.checked_sub(dir_start)).ok_or_else(|| bad("a central directory past its end"))?;
        let directory = read(dir_start + shift, dir_len)?;
        let prefix = if root.is_empty() { String::new() } else { format!("{}/", root.trim_matches('/')) };
        let mut store = ZipStore { container, archive: archive.to_string(), version, len, files: HashMap::new(), dirs: Default::default() };
        let mut at = 0usize;
        let mut seen = 0u64;
        while at < directory.len() {
            if u32_at(&directory, at) != Some(CENTRAL_HEADER) {
                return Err(bad(&format!("central directory entry {seen} has no signature")));
            }
            let fixed = directory.get(at..at + 46).ok_or_else(|| bad("a truncated central directory"))?;
            let word = |o: usize| u16_at(fixed, o).unwrap_or(0);
            let long = |o: usize| u32_at(fixed, o).unwrap_or(0);
            let (name_len, extra_len, comment_len) = (usize::from(word(28)), usize::from(word(30)), usize::from(word(32)));
            let name = directory.get(at + 46..at + 46 + name_len).ok_or_else(|| bad("a truncated entry name"))?;
            let extra = directory.get(at + 46 + name_len..at + 46 + name_len + extra_len).ok_or_else(|| bad("a truncated extra field"))?;
            at += 46 + name_len + extra_len + comment_len;
            seen += 1;
            let (mut compressed, mut size, mut header) = (u64::from(long(20)), u64::from(long(24)), u64::from(long(42)));
            // The ZIP64 extra field holds, in this order, the fields whose 32-bit value is all ones.
            if let Some(mut zip64) = extra_field(extra, 0x0001) {
                for value in [&mut size, &mut compressed, &mut header] {
                    if *value == 0xffff_ffff {
                        *value = u64_at(zip64, 0).ok_or_else(|| bad("a truncated ZIP64 extra field"))?;
                        zip64 = &zip64[8..];
                    }
                }
            }
            let Ok(name) = std::str::from_utf8(name) else {
                tracing::warn!(archive, "an entry whose name is not UTF-8: passed over");
                continue;
            };
            let Some(key) = name.strip_prefix(prefix.as_str()) else { continue };
            let is_dir = key.ends_with('/');
            let Some(key) = entry_key(key.trim_end_matches('/')) else {
                if !key.is_empty() {
                    tracing::warn!(archive, entry = name, "an entry no key can name: passed over");
                }
                continue;
            };
            store.dirs.add(key, is_dir);
            if is_dir {
                continue;
            }
            let method = match (word(10), word(8) & 1) {
                (_, 1) => None,
                (0, _) => Some(Method::Stored),
                (8, _) => Some(Method::Deflated),
                _ => None,
            };
            let Some(method) = method else {
                // Kept, so that a read says why it fails rather than that the key is absent.
                tracing::warn!(
                    archive,
                    entry = name,
                    method = word(10),
                    "an encrypted entry or one of a method other than stored or deflate"
                );
                store
                    .files
                    .insert(key.to_string(), ZipEntry { method: None, crc: 0, compressed: 0, size: 0, header: 0, data: OnceLock::new() });
                continue;
            };
            let header = header
                .checked_add(shift)
                .filter(|h| *h < dir_start + shift)
                .ok_or_else(|| bad(&format!("{name}: its header lies past the entries")))?;
            // The last entry of a name wins: zarr-python's rewrites append.
            store
                .files
                .insert(key.to_string(), ZipEntry { method: Some(method), crc: long(16), compressed, size, header, data: OnceLock::new() });
        }
        if seen != entries {
            tracing::warn!(archive, entries, seen, "the end record counts another number of entries than the central directory holds");
        }
        Ok(store)
    }

    /// `len` bytes of the archive from `start`, of the version that was opened.
    fn read(&self, start: u64, len: u64) -> Result<Vec<u8>> {
        let changed = || Error::Stale(format!("{}: the archive changed since it was mounted (remount to see it)", self.archive));
        let (bytes, version) = match self.container.get_range_versioned(&self.archive, ByteRange::Range { start, len }) {
            Ok(Some(read)) => read,
            Ok(None) => return Err(Error::Stale(format!("{}: the archive was removed since it was mounted", self.archive))),
            // A range the archive no longer holds (it is shorter now), or any other failure of
            // a read of an archive that is no longer the one opened: the change is the cause.
            Err(e) => {
                return Err(match self.container.head(&self.archive) {
                    Ok(Some(now)) if now.version == self.version => e,
                    _ => changed(),
                });
            }
        };
        if version != self.version {
            return Err(changed());
        }
        Ok(bytes)
    }

    /// The entry of `key` and how its bytes are stored.
    fn entry(&self, key: &str) -> Result<Option<(&ZipEntry, Method)>> {
        match self.files.get(key) {
            Some(ZipEntry { method: None, .. }) => {
                Err(Error::Unsupported(format!("{key}: encrypted, or compressed by a method other than deflate")))
            }
            Some(e @ ZipEntry { method: Some(m), .. }) => Ok(Some((e, *m))),
            None => Ok(None),
        }
    }

    /// Where `e`'s bytes start, given the start of its local header's bytes as read.
    fn data_start(&self, key: &str, e: &ZipEntry, local: &[u8]) -> Result<u64> {
        let bad = |why: &str| Error::corrupt(key, format!("in {}: {why}", self.archive));
        if u32_at(local, 0) != Some(LOCAL_HEADER) {
            return Err(bad("no local header where the central directory says"));
        }
        let skip = 30 + u64::from(u16_at(local, 26).unwrap_or(0)) + u64::from(u16_at(local, 28).unwrap_or(0));
        let start = e.header + skip;
        if start.checked_add(e.compressed).is_none_or(|end| end > self.len) {
            return Err(bad("its bytes run past the end of the archive"));
        }
        Ok(*e.data.get_or_init(|| start))
    }

    /// The stored bytes of `e` (compressed as they are), reading its local header first when
    /// it was not read yet: one request for both where the entry is small.
    fn stored(&self, key: &str, e: &ZipEntry) -> Result<Vec<u8>> {
        if let Some(&start) = e.data.get() {
            return self.read(start, e.compressed);
        }
        // A local header's name and extra field are short (those of the central directory, or
        // an extra field of its own): the first read takes some room for them.
        let first = self.read(e.header, (30 + 512 + e.compressed).min(self.len - e.header))?;
        let start = self.data_start(key, e, &first)?;
        let (from, to) = ((start - e.header) as usize, (start - e.header + e.compressed) as usize);
        match first.get(from..to) {
            Some(bytes) => Ok(bytes.to_vec()),
            None => self.read(start, e.compressed),
        }
    }

    /// The whole value of `e`, inflated where it is compressed and checked against its CRC-32.
    fn value(&self, key: &str, e: &ZipEntry, method: Method) -> Result<Vec<u8>> {
        let stored = self.stored(key, e)?;
        let bad = |why: String| Error::corrupt(key, format!("in {}: {why}", self.archive));
        let bytes = match method {
            Method::Stored if stored.len() as u64 == e.size => stored,
            Method::Stored => return Err(bad(format!("a stored entry of {} bytes that says it holds {}", stored.len(), e.size))),
            Method::Deflated => {
                let mut out = Vec::new();
                out.try_reserve_exact(e.size as usize).map_err(|_| crate::limits::out_of_memory())?;
                // Never more than the entry says it holds: a bomb stops at its declared size.
                flate2::read::DeflateDecoder::new(stored.as_slice())
                    .take(e.size + 1)
                    .read_to_end(&mut out)
                    .map_err(|err| bad(format!("deflate: {err}")))?;
                if out.len() as u64 != e.size {
                    return Err(bad(format!("inflates to another size than the {} bytes it says", e.size)));
                }
                out
            }
        };
        if crc32fast::hash(&bytes) != e.crc {
            return Err(bad("its CRC-32 does not match its bytes".into()));
        }
        Ok(bytes)
    }

    fn version_of(&self, e: &ZipEntry) -> Version {
        Version([self.version.0[0], self.version.0[1], e.header, e.size, u64::from(e.crc)])
    }
}

/// The data of the extra field `id` in a central directory entry's extra fields.
fn extra_field(mut extra: &[u8], id: u16) -> Option<&[u8]> {
    while extra.len() >= 4 {
        let (tag, len) = (u16_at(extra, 0)?, usize::from(u16_at(extra, 2)?));
        let data = extra.get(4..4 + len)?;
        if tag == id {
            return Some(data);
        }
        extra = &extra[4 + len..];
    }
    None
}

impl Store for ZipStore {
    super::read_only_writes!();

    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>> {
        let Some((e, method)) = self.entry(key)? else { return Ok(None) };
        if e.size > max || e.compressed > max.saturating_mul(1032).max(1 << 20) {
            return Err(Error::refused(key, format!("{} bytes, more than the {max} it can hold (not read)", e.size)));
        }
        Ok(Some(Value { bytes: self.value(key, e, method)?, version: self.version_of(e) }))
    }

    fn head(&self, key: &str) -> Result<Option<Head>> {
        Ok(self.entry(key)?.map(|(e, _)| Head { len: e.size, version: self.version_of(e) }))
    }

    fn get_range_versioned(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        let Some((e, method)) = self.entry(key)? else { return Ok(None) };
        let (start, end) = resolve_range(key, range, e.size)?;
        let bytes = match method {
            Method::Stored => {
                let data = match e.data.get() {
                    Some(&d) => d,
                    None => self.data_start(key, e, &self.read(e.header, 30.min(self.len - e.header))?)?,
                };
                self.read(data + start, end - start)?
            }
            Method::Deflated if e.size > MAX_INFLATED => {
                return Err(Error::refused(key, format!("a compressed entry of {} bytes (at most {MAX_INFLATED} are inflated)", e.size)));
            }
            Method::Deflated => self.value(key, e, method)?[start as usize..end as usize].to_vec(),
        };
        Ok(Some((bytes, self.version_of(e))))
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        Ok(self.dirs.list(prefix))
    }

    fn usage(&self, prefix: &str, most: u64) -> Result<Option<Usage>> {
        let lead = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
        let mut usage = Usage { complete: true, ..Usage::default() };
        for (key, e) in &self.files {
            if key.starts_with(&lead) {
                if usage.values >= most {
                    usage.complete = false;
                    break;
                }
                usage.values += 1;
                usage.bytes += e.compressed.min(self.len);
            }
        }
        Ok(Some(usage))
    }

    fn permissions(&self, key: &str) -> Result<Option<Permissions>> {
        let present = key.is_empty() || self.files.contains_key(key) || self.dirs.is_dir(key);
        let Some(archive) = self.container.permissions(&self.archive)?.filter(|_| present) else { return Ok(None) };
        // Who may read the archive may read all of it: its directories are entered as it is read.
        // An archive named through a link is its owner's alone (the link's bits say nothing).
        let mode = if archive.link { 0o600 } else { archive.mode };
        Ok(Some(Permissions { mode: mode | ((mode & 0o444) >> 2), gid: archive.gid, link: false }))
    }

    fn requests(&self) -> Option<serde_json::Value> {
        self.container.requests()
    }

    fn requests_are_round_trips(&self) -> bool {
        self.container.requests_are_round_trips()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, PackOptions, ZipWriter};

    /// An archive of `entries`, written with `options`, as the value `a.zip` of a memory store.
    fn archive(entries: &[(&str, &[u8])], options: PackOptions) -> (Arc<dyn Store>, Vec<u8>) {
        let mut zip = ZipWriter::new(Vec::new(), options);
        for (name, value) in entries {
            zip.add(name, value).unwrap();
        }
        let bytes = zip.finish().unwrap();
        let store = Arc::new(MemoryStore::new());
        store.set("a.zip", &bytes).unwrap();
        (store, bytes)
    }

    fn open(store: &Arc<dyn Store>, root: &str) -> Result<ZipStore> {
        ZipStore::open(store.clone(), "a.zip", root)
    }

    const CHUNK: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

    #[test]
    fn stored_deflated_and_zip64_archives_serve_their_entries() {
        for options in [
            PackOptions::default(),
            PackOptions { deflate: true, ..PackOptions::default() },
            PackOptions { zip64: true, comment: b"{\"ome\":{\"version\":\"0.5\"}}\0".to_vec(), ..PackOptions::default() },
        ] {
            let (store, _) = archive(&[("zarr.json", b"{}"), ("a/zarr.json", b"{\"x\":1}"), ("a/c/0/1", CHUNK)], options.clone());
            let zip = open(&store, "").unwrap();
            let names = |p: &str| zip.list_dir(p).unwrap().into_iter().map(|e| (e.name, e.is_dir)).collect::<Vec<_>>();
            assert_eq!(names(""), [("a".to_string(), true), ("zarr.json".to_string(), false)], "{options:?}");
            assert_eq!(names("a/c/0"), [("1".to_string(), false)]);
            assert_eq!(zip.get("a/c/0/1", 100).unwrap().unwrap(), CHUNK);
            assert_eq!(zip.head("a/c/0/1").unwrap().unwrap().len, CHUNK.len() as u64);
            assert_eq!(zip.get_range("a/c/0/1", ByteRange::Range { start: 10, len: 5 }).unwrap().unwrap(), b"abcde");
            assert_eq!(zip.get_range("a/c/0/1", ByteRange::Suffix(3)).unwrap().unwrap(), b"xyz");
            // Read again: the entry's start is known now.
            assert_eq!(zip.get("a/c/0/1", 100).unwrap().unwrap(), CHUNK);
            assert!(zip.get("a/c/0/2", 100).unwrap().is_none());
            assert!(matches!(zip.get("a/c/0/1", 10), Err(Error::Refused { .. })), "a bound is kept");
            assert!(matches!(zip.set("b", b"x"), Err(Error::ReadOnly)));
            // A directory inside the archive, as the root.
            let inner = open(&store, "a/").unwrap();
            assert_eq!(inner.get("zarr.json", 100).unwrap().unwrap(), b"{\"x\":1}");
            assert_eq!(inner.list_dir("").unwrap().len(), 2);
            let usage = zip.usage("a", 100).unwrap().unwrap();
            assert_eq!((usage.values, usage.complete), (2, true));
        }
    }

    #[test]
    fn an_archive_with_a_long_comment_is_found_past_it() {
        // A comment of 60 000 bytes that holds an end record's signature of its own.
        let mut comment = vec![b'x'; 60_000];
        comment[59_000..59_004].copy_from_slice(&END.to_le_bytes());
        let (store, _) = archive(&[("c/0", CHUNK)], PackOptions { comment, ..PackOptions::default() });
        assert_eq!(open(&store, "").unwrap().get("c/0", 100).unwrap().unwrap(), CHUNK);
    }

    #[test]
    fn the_last_entry_of_a_name_is_served_and_leading_bytes_are_passed_over() {
        let (store, bytes) = archive(&[("zarr.json", b"{}"), ("c/0", b"old"), ("c/0", b"newer")], PackOptions::default());
        assert_eq!(open(&store, "").unwrap().get("c/0", 100).unwrap().unwrap(), b"newer");
        // An archive appended to other bytes (a self-extracting stub): its offsets shift.
        let mut shifted = b"#!/bin/sh\nexit 0\n".to_vec();
        shifted.extend_from_slice(&bytes);
        store.set("a.zip", &shifted).unwrap();
        assert_eq!(open(&store, "").unwrap().get("c/0", 100).unwrap().unwrap(), b"newer");
    }

    #[test]
    fn a_changed_archive_fails_its_reads_rather_than_serving_the_wrong_bytes() {
        let (store, bytes) = archive(&[("c/0", CHUNK)], PackOptions::default());
        let zip = open(&store, "").unwrap();
        store.set("a.zip", &bytes).unwrap();
        assert!(matches!(zip.get("c/0", 100), Err(Error::Stale(_))));
        // Replaced by one too short to hold the entry where it was: still the change's error.
        let zip = open(&store, "").unwrap();
        store.set("a.zip", b"PK").unwrap();
        let err = zip.get("c/0", 100).unwrap_err();
        assert!(matches!(err, Error::Stale(_)), "{err}");
    }

    #[test]
    fn hostile_archives_are_refused_with_reasons() {
        let (store, bytes) =
            archive(&[("zarr.json", b"{}"), ("c/0", CHUNK), ("../up", b"x"), ("/abs", b"x"), ("a//b", b"x")], PackOptions::default());
        // Names no key can have are passed over.
        let zip = open(&store, "").unwrap();
        let names: Vec<String> = zip.list_dir("").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["c", "zarr.json"]);
        let find = |needle: &[u8]| bytes.windows(needle.len()).position(|w| w == needle).unwrap();
        let corrupt = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = bytes.clone();
            f(&mut b);
            store.set("a.zip", &b).unwrap();
            open(&store, "").and_then(|z| z.get("c/0", 100))
        };
        // A flipped byte of a chunk: its CRC says so.
        let at = find(CHUNK);
        let err = corrupt(&|b| b[at + 3] ^= 1).unwrap_err();
        assert!(err.to_string().contains("CRC-32"), "{err}");
        // Not an archive at all; a truncated one.
        assert!(corrupt(&|b| b.truncate(10)).unwrap_err().to_string().contains("not a zip archive"));
        assert!(corrupt(&|b| b.truncate(b.len() - 30)).is_err());
        // A central directory that says it is huge.
        let end = bytes.len() - 22;
        let err = corrupt(&|b| b[end + 12..end + 16].copy_from_slice(&0xfff0_0000u32.to_le_bytes())).unwrap_err();
        assert!(err.to_string().contains("central directory"), "{err}");
        // An entry encrypted, or of another method: said when read.
        let central = find(&0x0201_4b50u32.to_le_bytes()[..]) + 46 + "zarr.json".len();
        let err = corrupt(&|b| b[central + 8] = 1).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        let err = corrupt(&|b| b[central + 10] = 12).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
    }

    #[test]
    fn a_deflate_bomb_stops_at_its_declared_size() {
        let big = vec![0u8; 1 << 20];
        let (store, bytes) = archive(&[("c/0", &big)], PackOptions { deflate: true, ..PackOptions::default() });
        // Declare 1000 bytes where a mebibyte inflates (and its CRC that of those 1000).
        let mut b = bytes.clone();
        let crc = crc32fast::hash(&big[..1000]).to_le_bytes();
        let size = 1000u32.to_le_bytes();
        let central = b.windows(4).position(|w| w == 0x0201_4b50u32.to_le_bytes()).unwrap();
        b[central + 16..central + 20].copy_from_slice(&crc);
        b[central + 24..central + 28].copy_from_slice(&size);
        store.set("a.zip", &b).unwrap();
        let err = open(&store, "").unwrap().get("c/0", 1 << 30).unwrap_err();
        assert!(err.to_string().contains("inflates to another size"), "{err}");
    }
}
