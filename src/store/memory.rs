//! An in-memory store, for tests of the core without a disk.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{ByteRange, Entry, Store, resolve_range};
use crate::Result;

#[derive(Default)]
pub struct MemoryStore {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

impl Store for MemoryStore {
    fn get(&self, key: &str, max: u64) -> Result<Option<Vec<u8>>> {
        match self.lock().get(key) {
            Some(v) if v.len() as u64 > max => Err(crate::Error::refused(key, format!("{} bytes, more than {max}", v.len()))),
            v => Ok(v.cloned()),
        }
    }

    fn get_range(&self, key: &str, range: ByteRange) -> Result<Option<Vec<u8>>> {
        let map = self.lock();
        let Some(v) = map.get(key) else {
            return Ok(None);
        };
        let (start, end) = resolve_range(key, range, v.len() as u64)?;
        Ok(Some(v[start as usize..end as usize].to_vec()))
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.lock().insert(key.to_string(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.lock().remove(key);
        Ok(())
    }

    fn sync(&self, _keys: &[String]) -> Result<()> {
        Ok(())
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        let map = self.lock();
        let lead = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
        let mut out: Vec<Entry> = Vec::new();
        for key in map.keys().filter(|k| k.starts_with(&lead)) {
            let rest = &key[lead.len()..];
            let (name, is_dir) = match rest.find('/') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            if out.last().is_some_and(|e| e.name == name) {
                continue;
            }
            out.push(Entry { name: name.to_string(), is_dir });
        }
        Ok(out)
    }
}
