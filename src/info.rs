//! `zarrfs info`: the hierarchy with each array's shape, type, grid, keys and codecs, and any
//! problem — from metadata alone, never reading a chunk.

use serde_json::{Value, json};

use crate::store::{self, Store};
use crate::zarr::array::read_node;
use crate::zarr::metadata::{ArrayMetadata, NodeMetadata, ZarrFormat};
use crate::{Error, Result};

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
    })
}

/// Every node under `path`, depth first.
pub fn collect(store: &dyn Store, path: &str) -> Result<Vec<Value>> {
    let node = read_node(store, path);
    if matches!(node, Ok(None)) && path.is_empty() {
        return Err(Error::metadata("not a Zarr store: no zarr.json, .zgroup or .zarray at its root"));
    }
    let is_group = matches!(node, Ok(Some(NodeMetadata::Group)));
    let mut out = vec![describe(path, &node)];
    if is_group {
        for e in store.list_dir(path)? {
            if !e.is_dir || e.name.starts_with("__") {
                continue;
            }
            let child = store::join(path, &e.name);
            if !matches!(read_node(store, &child), Ok(None)) {
                out.extend(collect(store, &child)?);
            }
        }
    }
    Ok(out)
}

/// The text form: one line per node.
pub fn render(nodes: &[Value]) -> String {
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
                s.push_str(&format!(
                    "{path}  array v{}  {} {}  chunks {}  keys {}  codecs {}  ({size})\n",
                    n["zarr_format"],
                    n["data_type"].as_str().unwrap_or("?"),
                    n["shape"],
                    n["chunk_grid"].as_str().unwrap_or("?"),
                    n["chunk_key_encoding"].as_str().unwrap_or("?"),
                    codecs.join(" | ")
                ));
            }
        }
    }
    s
}
