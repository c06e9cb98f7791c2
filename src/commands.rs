//! The offline commands, which change or describe a store without mounting it: `adopt`,
//! `prepend` and `info` (the hierarchy with each array's shape, type, grid, keys and codecs,
//! and any problem — from metadata alone, never reading a chunk).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::headers::HeaderFormat;
use crate::store::{self, Location, Store};

/// The store an offline command works on, opened, and where it is (for messages).
pub struct OpenedStore {
    pub store: Arc<dyn Store>,
    pub location: Location,
}
use crate::zarr::array::Array;
use crate::zarr::metadata::{ArrayMetadata, NodeMetadata, ZarrFormat};
use crate::zarr::node::{is_hidden, is_node, read_node};
use crate::{Error, Result};

/// `zarrfs adopt`: switch an array to the offset chunk key encoding (metadata only).
pub fn adopt(store: &OpenedStore, array: &str) -> ExitCode {
    offline(store, array, |a| {
        let adopted = a.adopted_offset()?;
        adopted.store_metadata()?;
        println!("{}: chunk key encoding {}", array, adopted.meta.key_encoding.describe());
        Ok(())
    })
}

/// `zarrfs prepend`: prepend a raw file's rows along `axis`.
pub fn prepend(store: &OpenedStore, array: &str, file: &Path, axis: usize) -> ExitCode {
    offline(store, array, |a| {
        let f = std::fs::File::open(file)?;
        let len = f.metadata()?.len();
        let started = std::time::Instant::now();
        match a.prepend(axis, len, Arc::new(f), &crate::pool::WorkerPool::per_core())? {
            Some((next, _)) => {
                let chunks = started.elapsed();
                next.store_metadata()?;
                let metadata = started.elapsed() - chunks;
                println!("{}: shape {:?}, chunk key encoding {}", array, next.meta.shape, next.meta.key_encoding.describe());
                eprintln!("new chunks stored in {:.6} s; metadata written in {:.6} s", chunks.as_secs_f64(), metadata.as_secs_f64());
            }
            None => println!("{array}: nothing to prepend"),
        }
        Ok(())
    })
}

/// `zarrfs info`: the hierarchy under `path`, as text or JSON.
pub fn info(opened: &OpenedStore, path: Option<String>, as_json: bool) -> ExitCode {
    let path = path.unwrap_or_default().trim_matches('/').to_string();
    match collect(opened.store.as_ref(), &path) {
        Ok(nodes) if as_json => {
            println!("{}", serde_json::to_string_pretty(&nodes).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(nodes) => {
            print!("{}", render(&nodes));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("zarrfs: {}: {e}", opened.location);
            ExitCode::FAILURE
        }
    }
}

/// Run an offline change on one array of a store.
fn offline(opened: &OpenedStore, array: &str, change: impl FnOnce(&Array) -> Result<()>) -> ExitCode {
    let path = array.trim_matches('/');
    let result = Array::open(opened.store.clone(), path).and_then(|a| change(&a));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zarrfs: {}/{path}: {e}", opened.location);
            ExitCode::FAILURE
        }
    }
}

/// One node of the report.
fn describe(path: &str, node: &Result<Option<NodeMetadata>>) -> Value {
    let shown = format!("/{path}");
    match node {
        Ok(Some(NodeMetadata::Group)) => json!({"path": shown, "node_type": "group"}),
        Ok(Some(NodeMetadata::Array(a))) => describe_array(&shown, a),
        Ok(None) => {
            json!({"path": shown, "node_type": null, "problem": "no zarr.json, .zarray or .zgroup here"})
        }
        Err(e) => json!({"path": shown, "node_type": null, "problem": e.to_string()}),
    }
}

fn describe_array(path: &str, a: &ArrayMetadata) -> Value {
    json!({
        "path": path,
        "node_type": "array",
        "zarr_format": if a.format == ZarrFormat::V2 { 2 } else { 3 },
        "shape": a.shape,
        "data_type": a.dtype.name(),
        "chunk_grid": a.grid.describe(),
        "chunk_key_encoding": a.key_encoding.describe(),
        "codecs": a.codecs.describe(),
        // Variable-length arrays show text, whose size is known only once rendered.
        "data_bytes": if a.dtype.is_variable() { Value::Null } else { json!(a.byte_len()) },
        // What a rewrite of the document through a mount may change in place.
        "edits": a.in_place_edits(),
        // Why writes are refused, when they are (a filter that would not give back what is written).
        "read_only": a.codecs.write_refusal(),
        // Each header view: shown (true), or why the format cannot express the array.
        "views": HeaderFormat::ALL
            .iter()
            .map(|f| (f.file_name().to_string(), f.layout(&a.dtype, &a.shape).map_or_else(Value::from, |_| Value::Bool(true))))
            .collect::<serde_json::Map<_, _>>(),
    })
}

/// Every node under `path`, depth first.
fn collect(store: &dyn Store, path: &str) -> Result<Vec<Value>> {
    let node = read_node(store, path).map(|n| n.map(|(meta, _)| meta));
    if matches!(node, Ok(None)) && path.is_empty() {
        return Err(Error::metadata("not a Zarr store: no zarr.json, .zgroup or .zarray at its root"));
    }
    let is_group = matches!(node, Ok(Some(NodeMetadata::Group)));
    let mut out = vec![describe(path, &node)];
    if is_group {
        for e in store.list_dir(path)? {
            if !e.is_dir || is_hidden(&e.name) {
                continue;
            }
            let child = store::join(path, &e.name);
            // A node that cannot be read is described with its problem.
            if is_node(store, &child).unwrap_or(true) {
                out.extend(collect(store, &child)?);
            }
        }
    }
    Ok(out)
}

/// The text form: one line per node.
fn render(nodes: &[Value]) -> String {
    let mut s = String::new();
    for n in nodes {
        let path = n["path"].as_str().unwrap_or("?");
        match (n["node_type"].as_str(), n.get("problem")) {
            (_, Some(p)) => s.push_str(&format!("{path}  PROBLEM: {}\n", p.as_str().unwrap_or(""))),
            (Some("group"), _) => s.push_str(&format!("{path}  group\n")),
            _ => {
                let codecs: Vec<String> = n["codecs"]
                    .as_array()
                    .map(|a| a.iter().map(|c| format!("{}{}", c["name"].as_str().unwrap_or("?"), c["configuration"])).collect())
                    .unwrap_or_default();
                let size = match n["data_bytes"].as_u64() {
                    Some(b) => format!("{b} bytes"),
                    None => "text".to_string(),
                };
                let views = n["views"].as_object().map_or_else(String::new, |views| {
                    let (shown, absent): (Vec<_>, Vec<_>) = views.iter().partition(|(_, v)| v.as_bool() == Some(true));
                    let mut s = format!("  views {}", shown.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(" "));
                    for (name, why) in absent {
                        s.push_str(&format!(" (no {name}: {})", why.as_str().unwrap_or("?")));
                    }
                    s
                });
                let edits: Vec<&str> = n["edits"].as_array().map(|e| e.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
                s.push_str(&format!(
                    "{path}  array v{}  {} {}  chunks {}  keys {}  codecs {}  ({size}){views}  edits {}\n",
                    n["zarr_format"],
                    n["data_type"].as_str().unwrap_or("?"),
                    n["shape"],
                    n["chunk_grid"].as_str().unwrap_or("?"),
                    n["chunk_key_encoding"].as_str().unwrap_or("?"),
                    codecs.join(" | "),
                    edits.join(" ")
                ));
            }
        }
    }
    s
}
