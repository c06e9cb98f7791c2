//! Writing a store into a zip archive (`zarrfs pack`): zipped OME-Zarr (`.ozx`) in the order
//! OME RFC-9 recommends — every node document first, breadth-first from the root's, entries
//! stored (not compressed), ZIP64 — or a plain `.zip` that zarr-python's `ZipStore` opens.

use std::io::{self, Write};
use std::path::Path;

use super::{Store, join};
use crate::{Error, Result};

/// How an archive is written.
#[derive(Clone, Debug, Default)]
pub struct PackOptions {
    /// Compress entries with deflate (never for `.ozx`, whose chunks are compressed already).
    pub deflate: bool,
    /// ZIP64 records for every entry and at the end, whether or not the sizes need them.
    pub zip64: bool,
    /// The archive comment.
    pub comment: Vec<u8>,
}

/// A zip archive written entry by entry to `out`.
pub struct ZipWriter<W: Write> {
    out: W,
    options: PackOptions,
    offset: u64,
    central: Vec<u8>,
    entries: u64,
}

const ALL_ONES: u32 = 0xffff_ffff;

impl<W: Write> ZipWriter<W> {
    pub fn new(out: W, options: PackOptions) -> ZipWriter<W> {
        ZipWriter { out, options, offset: 0, central: Vec::new(), entries: 0 }
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Add the entry `name` holding `value`. A name added twice is two entries: a reader
    /// serves the last (as zarr-python's rewrites leave them).
    pub fn add(&mut self, name: &str, value: &[u8]) -> io::Result<()> {
        if name.len() > 0xffff {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a key of {} bytes (a zip entry name has at most 65 535)", name.len()),
            ));
        }
        let crc = crc32fast::hash(value);
        let (method, stored) = if self.options.deflate {
            let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(value)?;
            (8u16, std::borrow::Cow::Owned(z.finish()?))
        } else {
            (0u16, std::borrow::Cow::Borrowed(value))
        };
        let (size, compressed, header) = (value.len() as u64, stored.len() as u64, self.offset);
        let zip64 = self.options.zip64 || size >= u64::from(ALL_ONES) || compressed >= u64::from(ALL_ONES);
        let far = self.options.zip64 || header >= u64::from(ALL_ONES);
        let narrow = |v: u64, wide: bool| if wide { ALL_ONES } else { v as u32 };
        let needed: u16 = if zip64 || far { 45 } else { 20 };
        // Flag 0x0800: the name is UTF-8. Times are the DOS epoch: an archive of the same store
        // is the same bytes.
        let common = |out: &mut Vec<u8>| {
            out.extend_from_slice(&needed.to_le_bytes());
            out.extend_from_slice(&0x0800u16.to_le_bytes());
            out.extend_from_slice(&method.to_le_bytes());
            out.extend_from_slice(&[0, 0, 0x21, 0]);
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&narrow(compressed, zip64).to_le_bytes());
            out.extend_from_slice(&narrow(size, zip64).to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        };
        let extra = |fields: &[u64]| {
            let mut e = Vec::new();
            if !fields.is_empty() {
                e.extend_from_slice(&1u16.to_le_bytes());
                e.extend_from_slice(&((fields.len() * 8) as u16).to_le_bytes());
                fields.iter().for_each(|f| e.extend_from_slice(&f.to_le_bytes()));
            }
            e
        };
        let sizes = [size, compressed];
        let local_extra = extra(if zip64 { &sizes } else { &[] });
        let mut local = 0x0403_4b50u32.to_le_bytes().to_vec();
        common(&mut local);
        local.extend_from_slice(&(local_extra.len() as u16).to_le_bytes());
        local.extend_from_slice(name.as_bytes());
        local.extend_from_slice(&local_extra);
        self.put(&local)?;
        self.put(&stored)?;
        // The central directory's ZIP64 field holds, in order, the fields set to all ones.
        let mut wide = Vec::new();
        if zip64 {
            wide.extend([size, compressed]);
        }
        if far {
            wide.push(header);
        }
        let central_extra = extra(&wide);
        let c = &mut self.central;
        let start = c.len();
        c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        c.extend_from_slice(&(0x0300u16 | 45).to_le_bytes());
        let mut fields = Vec::new();
        common(&mut fields);
        c.extend_from_slice(&fields);
        c.extend_from_slice(&(central_extra.len() as u16).to_le_bytes());
        c.extend_from_slice(&[0; 6]);
        // External attributes: a regular file, 0644.
        c.extend_from_slice(&(0o100644u32 << 16).to_le_bytes());
        c.extend_from_slice(&narrow(header, far).to_le_bytes());
        c.extend_from_slice(name.as_bytes());
        c.extend_from_slice(&central_extra);
        debug_assert_eq!(c.len() - start, 46 + name.len() + central_extra.len());
        self.entries += 1;
        Ok(())
    }

    /// Write the central directory and the end records; returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        let (start, len) = (self.offset, self.central.len() as u64);
        let central = std::mem::take(&mut self.central);
        self.put(&central)?;
        let zip64 = self.options.zip64 || self.entries >= 0xffff || start >= u64::from(ALL_ONES) || len >= u64::from(ALL_ONES);
        if zip64 {
            let end64 = self.offset;
            let mut r = 0x0606_4b50u32.to_le_bytes().to_vec();
            r.extend_from_slice(&44u64.to_le_bytes());
            r.extend_from_slice(&(0x0300u16 | 45).to_le_bytes());
            r.extend_from_slice(&45u16.to_le_bytes());
            r.extend_from_slice(&[0; 8]);
            for v in [self.entries, self.entries, len, start] {
                r.extend_from_slice(&v.to_le_bytes());
            }
            r.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
            r.extend_from_slice(&0u32.to_le_bytes());
            r.extend_from_slice(&end64.to_le_bytes());
            r.extend_from_slice(&1u32.to_le_bytes());
            self.put(&r)?;
        }
        let count = if zip64 { 0xffff } else { self.entries as u16 };
        let mut end = 0x0605_4b50u32.to_le_bytes().to_vec();
        end.extend_from_slice(&[0; 4]);
        end.extend_from_slice(&count.to_le_bytes());
        end.extend_from_slice(&count.to_le_bytes());
        end.extend_from_slice(&(if zip64 { ALL_ONES } else { len as u32 }).to_le_bytes());
        end.extend_from_slice(&(if zip64 { ALL_ONES } else { start as u32 }).to_le_bytes());
        let comment = std::mem::take(&mut self.options.comment);
        end.extend_from_slice(&(comment.len().min(0xffff) as u16).to_le_bytes());
        end.extend_from_slice(&comment[..comment.len().min(0xffff)]);
        self.put(&end)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The node documents, first in an archive (the root's `.zmetadata` among them).
const DOCUMENTS: [&str; 5] = ["zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"];

/// Every key of `store`, node documents first (breadth-first from the root's), then the rest
/// in order: the entry order of RFC-9. Also the names left out because no key can hold them.
fn ordered_keys(store: &dyn Store) -> Result<(Vec<String>, Vec<String>)> {
    let (mut documents, mut rest, mut left_out) = (Vec::new(), Vec::new(), Vec::new());
    let mut level = vec![String::new()];
    while !level.is_empty() {
        let mut next = Vec::new();
        for dir in level {
            left_out.extend(store.unnamed(&dir)?);
            for entry in store.list_dir(&dir)? {
                let key = join(&dir, &entry.name);
                if entry.is_dir {
                    next.push(key);
                } else if DOCUMENTS.contains(&entry.name.as_str()) {
                    documents.push(key);
                } else if !super::is_temporary(&entry.name) {
                    rest.push(key);
                }
            }
        }
        level = next;
    }
    rest.sort();
    documents.extend(rest);
    Ok((documents, left_out))
}

/// What `pack` wrote.
pub struct Packed {
    pub entries: u64,
    pub bytes: u64,
    /// The OME-Zarr version the `.ozx` comment names, when the root is an OME-Zarr image.
    pub ome: Option<String>,
    /// Names in the store no key can hold (not UTF-8), escaped: not in the archive.
    pub left_out: Vec<String>,
}

/// Write every value of `store` into the archive `out` (`.ozx`: RFC-9's recommended variant,
/// else a plain zip, deflated when asked). The archive is written beside `out` and renamed
/// into place once whole: a failure leaves no partial archive.
pub fn pack(store: &dyn Store, out: &Path, deflate: bool) -> Result<Packed> {
    let ozx = out.extension().is_some_and(|e| e.eq_ignore_ascii_case("ozx"));
    if ozx && deflate {
        return Err(Error::Invalid("an .ozx archive is not compressed (RFC-9): leave out --deflate".into()));
    }
    let root = store.get("zarr.json", 64 << 20)?.and_then(|d| serde_json::from_slice::<serde_json::Value>(&d).ok());
    let ome = root.as_ref().and_then(|d| d.pointer("/attributes/ome/version")).and_then(|v| v.as_str()).map(str::to_string);
    // The comment says the archive is of the recommended variant: null-terminated JSON.
    let comment = match (&ome, ozx) {
        (Some(v), true) => {
            let mut c = serde_json::to_vec(&serde_json::json!({ "ome": { "version": v } })).unwrap_or_default();
            c.push(0);
            c
        }
        _ => Vec::new(),
    };
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let temp = tempfile::Builder::new().prefix(".zarrfs-pack-").tempfile_in(dir)?;
    let mut zip = ZipWriter::new(io::BufWriter::with_capacity(1 << 20, temp.as_file()), PackOptions { deflate, zip64: ozx, comment });
    let (keys, left_out) = ordered_keys(store)?;
    for key in &keys {
        let value = store.get(key, u64::MAX)?.ok_or_else(|| Error::Stale(format!("{key} was removed while the store was packed")))?;
        zip.add(key, &value)?;
    }
    zip.finish()?;
    // Readable as any file the user writes (a temporary file is the owner's alone), but by no
    // one the store keeps out.
    temp.as_file().set_permissions(<std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(archive_mode(store)?))?;
    temp.as_file().sync_all()?;
    let bytes = temp.as_file().metadata()?.len();
    temp.persist(out).map_err(|e| Error::Io(e.error))?;
    Ok(Packed { entries: keys.len() as u64, bytes, ome: ome.filter(|_| ozx), left_out })
}

/// The archive's mode: what the umask leaves of 0666, read by group or others only where the
/// store's root directory lets them in and its root document lets them read (a store without
/// permissions of its own, in object storage, leaves it to the umask).
fn archive_mode(store: &dyn Store) -> Result<u32> {
    // SAFETY: umask is read by setting it and setting it back; no thread of this command
    // makes files meanwhile.
    let umask = unsafe {
        let old = libc::umask(0o077);
        libc::umask(old);
        old
    };
    let mut mode = 0o666 & !umask;
    if let Some(root) = store.permissions("")? {
        let document = DOCUMENTS.iter().find_map(|d| store.permissions(d).transpose()).transpose()?;
        for class in [3, 0] {
            let dir_in = (root.mode >> class) & 0o5 == 0o5;
            let doc_read = document.is_none_or(|d| !d.link && (d.mode >> class) & 0o4 != 0);
            if !(dir_in && doc_read) {
                mode &= !(0o7 << class);
            }
        }
    }
    Ok(mode)
}
