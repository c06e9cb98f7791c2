//! Rewriting an `offset`-encoded array to the `default` encoding (`zarrfs normalize`), so that
//! readers that do not know `offset` open it.
//!
//! Every chunk's key changes (grid cell `g` moves from `g + offset` to `g`), and a new key may
//! be another chunk's old one, so the keys cannot be renamed in place in any order a second run
//! could pick up after a crash. Instead, in a staging directory inside the array:
//!
//! 1. `plan` records the offset being removed (a second run checks it against the metadata);
//! 2. every chunk moves to its new key beneath the staging directory — old keys and new keys
//!    live in different places, so a run cut short is finished by moving what is left;
//! 3. `moved` marks that step done; every staged chunk then moves to its new key in the array
//!    (no old key is left there to collide with);
//! 4. the metadata is written with the `default` encoding (with consolidated metadata), and the
//!    staging directory is removed.
//!
//! Between 2 and 4 readers of the array see fill where chunks are staged: run it while nothing
//! reads or writes the array. A crash at any point loses no chunk; running it again finishes.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use super::array::Array;
use super::key::ChunkKeyEncoding;
use crate::store::{self, Store};
use crate::{Error, Result};

/// The staging directory's name inside the array: no chunk key and no node name (it starts
/// with a dot, and holds no node document).
pub const STAGING: &str = ".zarrfs-normalize";
const PLAN: &str = "plan";
const MOVED: &str = "moved";

/// A normalization to run: what is left to move.
pub struct Normalization<'a> {
    array: &'a Array,
    staging: String,
    /// Chunks still at their old keys: (old key, staged key).
    to_stage: Vec<(String, String)>,
    /// Keys of interrupted writes (temporary names): garbage, deleted.
    leftovers: Vec<String>,
    staged_already: bool,
}

impl<'a> Normalization<'a> {
    /// What normalizing `array` takes; `None` when it is not offset-encoded (a staging
    /// directory a finished run left is removed then).
    pub fn plan(array: &'a Array) -> Result<Option<Normalization<'a>>> {
        let store = array.store.as_ref();
        let staging = store::join(&array.path, STAGING);
        let ChunkKeyEncoding::Offset { offset, separator } = &array.meta.key_encoding else {
            // The metadata is written only after every chunk moved: what is left is the plan.
            if store.get(&store::join(&staging, MOVED), 0)?.is_some() || store.get(&store::join(&staging, PLAN), 4096)?.is_some() {
                remove_staging(store, &staging)?;
            }
            return Ok(None);
        };
        let plan = json!({"offset": offset, "separator": separator.to_string()});
        let planned = store.get(&store::join(&staging, PLAN), 64 * 1024)?;
        if planned.is_none() && offset.iter().all(|&o| o == 0) {
            // The keys are the default encoding's already: the metadata alone changes.
            return Ok(Some(Normalization { array, staging, to_stage: Vec::new(), leftovers: Vec::new(), staged_already: true }));
        }
        match planned {
            Some(bytes) if serde_json::from_slice::<serde_json::Value>(&bytes).ok().as_ref() != Some(&plan) => {
                return Err(Error::refused(
                    &staging,
                    "holds an interrupted normalization of another layout of this array; look at it, and remove it to start again",
                ));
            }
            Some(_) => {}
            None => {
                store.set(&store::join(&staging, PLAN), plan.to_string().as_bytes())?;
            }
        }
        let staged_already = store.get(&store::join(&staging, MOVED), 0)?.is_some();
        let target = array.default_encoded()?;
        let (mut to_stage, mut leftovers) = (Vec::new(), Vec::new());
        if !staged_already {
            let ndim = array.meta.shape.len();
            let (ours, _) = array.stored_keys()?;
            let lead = if array.path.is_empty() { String::new() } else { format!("{}/", array.path) };
            for key in ours {
                let relative = key.strip_prefix(&lead).unwrap_or(&key);
                match array.meta.key_encoding.decode(relative, ndim) {
                    Some(coords) => {
                        let new = target.chunk_key(&coords);
                        let new_relative = new.strip_prefix(&lead).unwrap_or(&new).to_string();
                        to_stage.push((key, store::join(&staging, &new_relative)));
                    }
                    None => leftovers.push(key),
                }
            }
        }
        Ok(Some(Normalization { array, staging, to_stage, leftovers, staged_already }))
    }

    /// How many moves are left (each chunk moves twice), for a progress line.
    pub fn moves(&self) -> u64 {
        2 * self.to_stage.len() as u64
    }

    /// Move every chunk, write the metadata, remove the staging directory; `done` counts the
    /// moves. The number of chunks renamed.
    pub fn run(self, done: &AtomicU64) -> Result<u64> {
        let store = self.array.store.as_ref();
        store.delete_many(&self.leftovers)?;
        for (old, staged) in &self.to_stage {
            match store.move_value(old, staged) {
                // Moved by a run cut short after the move itself.
                Ok(()) | Err(Error::NotFound) => {}
                Err(e) => return Err(e),
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
        if !self.staged_already {
            store.set(&store::join(&self.staging, MOVED), b"")?;
        }
        let mut renamed = 0;
        for staged in staged_keys(store, &self.staging)? {
            let relative = staged.strip_prefix(&format!("{}/", self.staging)).unwrap_or(&staged).to_string();
            store.move_value(&staged, &store::join(&self.array.path, &relative))?;
            renamed += 1;
            done.fetch_add(1, Ordering::Relaxed);
        }
        self.array.default_encoded()?.store_metadata()?;
        remove_staging(store, &self.staging)?;
        // The directories the old keys left empty (`c/-2`, …).
        store.remove_empty_dirs(&store::join(&self.array.path, "c"))?;
        Ok(renamed)
    }
}

/// Every chunk beneath the staging directory (not the plan or the marker).
fn staged_keys(store: &dyn Store, staging: &str) -> Result<Vec<String>> {
    let (mut keys, mut pending) = (Vec::new(), vec![staging.to_string()]);
    while let Some(dir) = pending.pop() {
        for e in store.list_dir(&dir)? {
            let key = store::join(&dir, &e.name);
            if e.is_dir {
                pending.push(key);
            } else if dir != staging || (e.name != PLAN && e.name != MOVED) {
                keys.push(key);
            }
        }
    }
    keys.sort();
    Ok(keys)
}

fn remove_staging(store: &dyn Store, staging: &str) -> Result<()> {
    store.delete(&store::join(staging, MOVED))?;
    store.delete(&store::join(staging, PLAN))?;
    store.remove_empty_dirs(staging)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::MemoryStore;

    fn store_with(offset: [i64; 2]) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [4, 2], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 2]}},
            "chunk_key_encoding": {"name": "offset", "configuration": {"offset": offset, "separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes"}]});
        store.set("zarr.json", br#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
        store.set("a/zarr.json", doc.to_string().as_bytes()).unwrap();
        // Cell g holds [g, g]; its key is c/(g + offset[0])/(0 + offset[1]).
        for g in 0..4i64 {
            store.set(&format!("a/c/{}/{}", g + offset[0], offset[1]), &[g as u8, g as u8]).unwrap();
        }
        store
    }

    fn cells(store: &Arc<dyn Store>) -> Vec<Vec<u8>> {
        (0..4).map(|g| store.get(&format!("a/c/{g}/0"), 16).unwrap().unwrap_or_default()).collect()
    }

    #[test]
    fn keys_move_to_the_default_encoding_and_the_metadata_last() {
        let store = store_with([-2, 0]);
        let array = Array::open(store.clone(), "a").unwrap();
        let plan = Normalization::plan(&array).unwrap().unwrap();
        assert_eq!(plan.moves(), 8);
        assert_eq!(plan.run(&AtomicU64::new(0)).unwrap(), 4);
        assert_eq!(cells(&store), (0..4u8).map(|g| vec![g, g]).collect::<Vec<_>>());
        let after = Array::open(store.clone(), "a").unwrap();
        assert!(matches!(after.meta.key_encoding, ChunkKeyEncoding::Default { separator: '/' }));
        assert!(store.get("a/c/-2/0", 16).unwrap().is_none() && store.get("a/.zarrfs-normalize/plan", 4096).unwrap().is_none());
        // Nothing more to do.
        assert!(Normalization::plan(&after).unwrap().is_none());
    }

    #[test]
    fn a_run_cut_short_is_finished_by_the_next() {
        for stop_after in 0..6 {
            let store = store_with([-2, 0]);
            let array = Array::open(store.clone(), "a").unwrap();
            let plan = Normalization::plan(&array).unwrap().unwrap();
            // A crash after `stop_after` moves of the first step.
            for (old, staged) in plan.to_stage.iter().take(stop_after.min(4)) {
                store.move_value(old, staged).unwrap();
            }
            if stop_after >= 4 {
                store.set("a/.zarrfs-normalize/moved", b"").unwrap();
                let staged = staged_keys(store.as_ref(), "a/.zarrfs-normalize").unwrap();
                for key in staged.iter().take(stop_after - 4) {
                    store.move_value(key, &key.replace(".zarrfs-normalize/", "")).unwrap();
                }
            }
            let array = Array::open(store.clone(), "a").unwrap();
            Normalization::plan(&array).unwrap().unwrap().run(&AtomicU64::new(0)).unwrap();
            assert_eq!(cells(&store), (0..4u8).map(|g| vec![g, g]).collect::<Vec<_>>(), "stopped after {stop_after}");
        }
    }

    #[test]
    fn zero_offsets_change_the_metadata_alone() {
        let store = store_with([0, 0]);
        let array = Array::open(store.clone(), "a").unwrap();
        let plan = Normalization::plan(&array).unwrap().unwrap();
        assert_eq!(plan.moves(), 0);
        plan.run(&AtomicU64::new(0)).unwrap();
        assert_eq!(cells(&store), (0..4u8).map(|g| vec![g, g]).collect::<Vec<_>>());
        assert!(matches!(Array::open(store, "a").unwrap().meta.key_encoding, ChunkKeyEncoding::Default { .. }));
    }

    #[test]
    fn an_interrupted_run_of_another_layout_is_refused() {
        let store = store_with([-2, 0]);
        store.set("a/.zarrfs-normalize/plan", br#"{"offset": [-1, 0], "separator": "/"}"#).unwrap();
        let array = Array::open(store.clone(), "a").unwrap();
        assert!(Normalization::plan(&array).is_err());
    }
}
