//! A store in a local directory: keys are relative paths.

use std::fs::{self, File};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ByteRange, Entry, Store, resolve_range};
use crate::Result;

pub struct LocalStore {
    root: PathBuf,
    temp_counter: AtomicU64,
}

impl LocalStore {
    pub fn new(root: impl Into<PathBuf>) -> LocalStore {
        LocalStore { root: root.into(), temp_counter: AtomicU64::new(0) }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> PathBuf {
        if key.is_empty() { self.root.clone() } else { self.root.join(key) }
    }
}

fn absent_as_none<T>(r: std::io::Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Store for LocalStore {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        // One open for a missing key (sparse arrays probe many); a directory is no value.
        match fs::read(self.path(key)) {
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Ok(None),
            other => absent_as_none(other),
        }
    }

    fn get_range(&self, key: &str, range: ByteRange) -> Result<Option<Vec<u8>>> {
        let Some(mut file) = absent_as_none(File::open(self.path(key)))? else {
            return Ok(None);
        };
        let len = file.metadata()?.len();
        let (start, end) = resolve_range(key, range, len)?;
        file.seek(SeekFrom::Start(start))?;
        let mut buf = vec![0u8; (end - start) as usize];
        file.read_exact(&mut buf)?;
        Ok(Some(buf))
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let path = self.path(key);
        let dir = path.parent().unwrap_or(&self.root);
        fs::create_dir_all(dir)?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // A temporary name in the same directory, then a rename: readers never see a torn value.
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.zarrfs-{}-{n}.tmp", std::process::id()));
        let written = File::create(&tmp).and_then(|mut f| f.write_all(value));
        if let Err(e) = written.and_then(|_| fs::rename(&tmp, &path)) {
            let _ = fs::remove_file(&tmp);
            return Err(e.into());
        }
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<()> {
        match fs::remove_file(self.path(key)) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    fn sync(&self, keys: &[String]) -> Result<()> {
        let mut dirs = std::collections::BTreeSet::new();
        for key in keys {
            let path = self.path(key);
            match File::open(&path) {
                Ok(f) => f.sync_all()?,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(dir) = path.parent() {
                dirs.insert(dir.to_path_buf());
            }
        }
        for dir in dirs {
            match File::open(&dir) {
                Ok(f) => f.sync_all()?,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn list_names_upto(&self, prefix: &str, max: usize) -> Result<Option<Vec<String>>> {
        let Some(read) = absent_as_none(fs::read_dir(self.path(prefix)))? else {
            return Ok(Some(Vec::new()));
        };
        let mut names = Vec::new();
        for entry in read {
            if names.len() == max {
                return Ok(None);
            }
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(Some(names))
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        let Some(read) = absent_as_none(fs::read_dir(self.path(prefix)))? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in read {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false)
                || (entry.file_type().map(|t| t.is_symlink()).unwrap_or(false) && entry.path().is_dir());
            out.push(Entry { name, is_dir });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}
