//! An in-memory store, for tests of the core without a disk.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{ByteRange, Entry, Expect, Head, Store, Value, Version, resolve_range};
use crate::Result;

/// Values with the number of the write that stored each (its version).
#[derive(Default)]
pub struct MemoryStore {
    map: Mutex<BTreeMap<String, (Vec<u8>, u64)>>,
    writes: std::sync::atomic::AtomicU64,
}

fn head(value: &(Vec<u8>, u64)) -> Head {
    Head { len: value.0.len() as u64, version: Version([value.1, 0, 0, 0, 0]) }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (Vec<u8>, u64)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

impl Store for MemoryStore {
    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>> {
        match self.lock().get(key) {
            Some((v, _)) if v.len() as u64 > max => Err(crate::Error::refused(key, format!("{} bytes, more than {max}", v.len()))),
            v => Ok(v.map(|v| Value { bytes: v.0.clone(), version: head(v).version })),
        }
    }

    fn head(&self, key: &str) -> Result<Option<Head>> {
        Ok(self.lock().get(key).map(head))
    }

    fn get_range_versioned(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        let map = self.lock();
        let Some(value) = map.get(key) else {
            return Ok(None);
        };
        let (start, end) = resolve_range(key, range, value.0.len() as u64)?;
        Ok(Some((value.0[start as usize..end as usize].to_vec(), head(value).version)))
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<Version> {
        let stored = (value.to_vec(), self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
        let version = head(&stored).version;
        self.lock().insert(key.to_string(), stored);
        Ok(version)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.lock().remove(key);
        Ok(())
    }

    fn set_if(&self, key: &str, value: &[u8], expect: Expect) -> Result<Version> {
        let mut map = self.lock();
        if !expect.holds(map.get(key).map(|v| head(v).version)) {
            return Err(crate::Error::conflict(key, "changed since it was read"));
        }
        let stored = (value.to_vec(), self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
        let version = head(&stored).version;
        map.insert(key.to_string(), stored);
        Ok(version)
    }

    fn delete_if(&self, key: &str, expect: Expect) -> Result<()> {
        let mut map = self.lock();
        if !expect.holds(map.get(key).map(|v| head(v).version)) {
            return Err(crate::Error::conflict(key, "changed since it was read"));
        }
        map.remove(key);
        Ok(())
    }

    fn hold_lock(self: std::sync::Arc<Self>, key: &str, wait: std::time::Duration) -> Result<super::Held> {
        super::lease::take(self, key, wait)
    }

    fn sync(&self, _keys: &[String]) -> Result<()> {
        Ok(())
    }

    fn rename_prefix(&self, from: &str, to: &str) -> Result<()> {
        let mut map = self.lock();
        let (from_lead, to_lead) = (format!("{from}/"), format!("{to}/"));
        if map.keys().any(|k| k.starts_with(&to_lead)) {
            return Err(crate::Error::Exists);
        }
        let moved: Vec<String> = map.keys().filter(|k| k.starts_with(&from_lead)).cloned().collect();
        for key in moved {
            if let Some(value) = map.remove(&key) {
                map.insert(format!("{to_lead}{}", &key[from_lead.len()..]), value);
            }
        }
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
