//! What the mount reports of itself: `.zarrfs/stats` (JSON) and the Prometheus text of
//! `--metrics-addr`, both read from the same counters, the cache's and the store's.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{ZarrFs, stats};
use crate::zarr::node::display_path;

impl ZarrFs {
    /// `.zarrfs/stats`.
    pub(super) fn stats_json(&self) -> Vec<u8> {
        let c = &self.cx.cache.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut doc = serde_json::json!({
            "cache": {
                "hits": load(&c.hits), "misses": load(&c.misses), "decoded_bytes": load(&c.decoded_bytes), "evictions": load(&c.evictions),
                "bytes": self.cx.cache.bytes(), "capacity": self.cx.cache.capacity(), "load_errors": load(&c.errors),
            },
            "dirty_bytes": self.cx.budget.held(),
            "arrays_open": self.nodes.open_arrays().len(),
            "inodes": self.cx.tree.inodes(),
            "heap_bytes": crate::heap::in_use(),
            "in_memory_file_bytes": self.nodes.scratch.held.bytes(),
            "attribute_bytes": self.nodes.attribute_bytes(),
            "pid": std::process::id(),
            "requests": self.stats.requests(),
            "request_us": self.stats.busy_us(),
            "errors": self.stats.errors(),
            "bytes": {"read": load(&self.stats.bytes_read), "written": load(&self.stats.bytes_written)},
        });
        if let Some(store) = self.cx.store.requests() {
            doc["store_requests"] = store;
        }
        // Arrays holding changes, and those whose stores failed (their changes wait, in memory).
        let arrays: Vec<serde_json::Value> = self
            .nodes
            .open_arrays()
            .iter()
            .filter_map(|a| {
                let dirty = crate::error::lock(&a.edits).dirty_bytes();
                let failed = a.failed_stores.load(Ordering::Relaxed);
                (dirty > 0 || failed > 0)
                    .then(|| serde_json::json!({"array": display_path(&a.array().path), "dirty_bytes": dirty, "failed_stores": failed}))
            })
            .collect();
        doc["failed_stores"] = serde_json::json!(arrays.iter().filter_map(|a| a["failed_stores"].as_u64()).sum::<u64>());
        doc["arrays_changed"] = serde_json::Value::Array(arrays);
        doc["store"] = serde_json::json!(self.cx.config.source);
        doc["log"] = serde_json::json!(self.cx.config.log.as_ref().map(|p| p.display().to_string()));
        doc["version"] = serde_json::json!(env!("CARGO_PKG_VERSION"));
        let mut out = stats::fixed_width_json(&doc);
        out.push(b'\n');
        out
    }

    /// The mount's metrics in Prometheus's text format (`--metrics-addr`).
    pub fn metrics(&self) -> Vec<u8> {
        let mut e = crate::metrics::Exposition::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let kinds: Vec<_> = self.stats.by_kind().collect();
        e.by(
            "zarrfs_requests_total",
            "counter",
            "File system requests answered, by kind",
            "op",
            kinds.iter().map(|(k, n, _)| (k.to_string(), *n as f64)),
        );
        e.by(
            "zarrfs_request_seconds_total",
            "counter",
            "Time the mount spent answering file system requests, by kind (the kernel's copies apart)",
            "op",
            kinds.iter().map(|(k, _, s)| (k.to_string(), *s)),
        );
        e.by(
            "zarrfs_request_errors_total",
            "counter",
            "File system requests answered with an error, by errno",
            "errno",
            self.stats.errors_by_name().into_iter().map(|(k, n)| (k.to_string(), n as f64)),
        );
        e.one("zarrfs_read_bytes_total", "counter", "Bytes answered to reads", load(&self.stats.bytes_read));
        e.one("zarrfs_written_bytes_total", "counter", "Bytes taken from writes", load(&self.stats.bytes_written));
        let c = &self.cx.cache.stats;
        e.one("zarrfs_cache_hits_total", "counter", "Chunk cache lookups that found the chunk", load(&c.hits));
        e.one("zarrfs_cache_misses_total", "counter", "Chunk cache lookups that read the chunk from the store", load(&c.misses));
        e.one("zarrfs_cache_evictions_total", "counter", "Chunks dropped from the cache to make room", load(&c.evictions));
        e.one("zarrfs_cache_decoded_bytes_total", "counter", "Bytes of chunks decoded into the cache", load(&c.decoded_bytes));
        e.one("zarrfs_cache_load_errors_total", "counter", "Chunk reads or decodes that failed", load(&c.errors));
        e.one("zarrfs_cache_bytes", "gauge", "Bytes the chunk cache holds", self.cx.cache.bytes() as f64);
        e.one("zarrfs_cache_capacity_bytes", "gauge", "The chunk cache's capacity (--cache-size)", self.cx.cache.capacity() as f64);
        e.one("zarrfs_dirty_bytes", "gauge", "Bytes written and not yet stored", self.cx.budget.held() as f64);
        e.one("zarrfs_open_arrays", "gauge", "Arrays with an open file", self.nodes.open_arrays().len() as f64);
        if let Some(heap) = crate::heap::in_use() {
            e.one("zarrfs_heap_bytes", "gauge", "Bytes the process has allocated", heap as f64);
        }
        if let Some(serde_json::Value::Object(requests)) = self.cx.store.requests() {
            let count = |(k, v): (&String, &serde_json::Value)| (k.clone(), v.as_f64().unwrap_or(0.0));
            e.by(
                "zarrfs_store_operations_total",
                "counter",
                "Store operations, by kind (one may take several HTTP requests: retries, pages of a listing)",
                "kind",
                requests.iter().filter(|(k, _)| !k.starts_with("bytes")).map(count),
            );
            e.one(
                "zarrfs_store_fetched_bytes_total",
                "counter",
                "Bytes read from the store",
                requests.get("bytes_fetched").and_then(|v| v.as_f64()).unwrap_or(0.0),
            );
        }
        e.counters();
        e.by("zarrfs_build_info", "gauge", "The running version", "version", [(env!("CARGO_PKG_VERSION").to_string(), 1.0)]);
        e.into_bytes()
    }
}
