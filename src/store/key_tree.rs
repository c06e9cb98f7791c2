//! The directories of a store whose keys are all known at once (a zip archive's central
//! directory, a reference set): the names under each directory, for listings.

use std::collections::{BTreeMap, HashMap};

use super::Entry;

#[derive(Default)]
pub struct KeyTree {
    /// The names under each directory (`""`: the root), `true` for a directory.
    dirs: HashMap<String, BTreeMap<String, bool>>,
}

impl KeyTree {
    /// Record `key` (a directory if `is_dir`) and every directory above it.
    pub fn add(&mut self, key: &str, is_dir: bool) {
        let mut parent = String::new();
        let parts: Vec<&str> = key.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            let dir = is_dir || i + 1 < parts.len();
            let names = self.dirs.entry(parent.clone()).or_default();
            let slot = names.entry(part.to_string()).or_insert(dir);
            *slot |= dir;
            parent = super::join(&parent, part);
        }
        if is_dir {
            self.dirs.entry(key.to_string()).or_default();
        }
    }

    pub fn is_dir(&self, key: &str) -> bool {
        self.dirs.contains_key(key)
    }

    pub fn list(&self, prefix: &str) -> Vec<Entry> {
        self.dirs
            .get(prefix)
            .map(|names| names.iter().map(|(name, &is_dir)| Entry { name: name.clone(), is_dir }).collect())
            .unwrap_or_default()
    }
}
