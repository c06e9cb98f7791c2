//! `zarrfs info`: the hierarchy under a path, as text or JSON — each group, image and dataset,
//! one block per array from its metadata (axes, chunks, codecs, georeference) and a count of
//! what it stores, never reading a chunk.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};

use super::OpenedStore;
use crate::headers::HeaderFormat;
use crate::headers::netcdf::{self, NO_DATASET};
use crate::headers::ometiff::{OmeTiff, Pyramid};
use crate::progress::human_bytes;
use crate::store::{self, Store};
use crate::zarr::array::Array;
use crate::zarr::axes::Axes;
use crate::zarr::dtype::DataType;
use crate::zarr::geo;
use crate::zarr::key::ChunkKeyEncoding;
use crate::zarr::metadata::{ArrayMetadata, Attributes, NodeMetadata, ZarrFormat};
use crate::zarr::node::{is_hidden, is_node, read_node, v2_attributes};
use crate::zarr::ome::{self, Image};
use crate::{Error, Result};

/// `zarrfs info`: the hierarchy under `path`, as text or JSON. A path that names no node fails.
pub fn info(opened: &OpenedStore, path: Option<String>, attributes: bool, as_json: bool) -> ExitCode {
    let path = path.unwrap_or_default().trim_matches('/').to_string();
    let nodes = match collect(&opened.store, &path) {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("zarrfs: {}: {e}", opened.location);
            return ExitCode::FAILURE;
        }
    };
    if as_json {
        say!("{}", serde_json::to_string_pretty(&nodes).unwrap_or_default());
    } else {
        // Names, attributes and problems come from the store: escaped before they are laid out.
        let nodes: Vec<Value> = nodes.into_iter().map(printable_strings).collect();
        let _ = write!(std::io::stdout(), "{}", render(&nodes, attributes));
    }
    ExitCode::SUCCESS
}

/// `value` with every string in it escaped for a terminal (`crate::error::printable`).
fn printable_strings(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(crate::error::printable(&s).into_owned()),
        Value::Array(items) => Value::Array(items.into_iter().map(printable_strings).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (crate::error::printable(&k).into_owned(), printable_strings(v))).collect())
        }
        other => other,
    }
}

/// How many of an array's stored values `info` counts before it says "at least".
const MOST_COUNTED: u64 = 100_000;

/// One node of the report; `parent` is the image its parent group is, if any.
fn describe(store: &Arc<dyn Store>, path: &str, node: &Result<Option<NodeMetadata>>, parent: Option<&Image>) -> Value {
    let shown = format!("/{path}");
    match node {
        Ok(Some(NodeMetadata::Group(attributes))) => {
            let attributes = &attributes.to_value();
            let mut group = json!({"path": shown, "node_type": "group", "attributes": attributes});
            if let Some(image) = ome::find(attributes) {
                group["image"] = describe_image(store.as_ref(), path, image);
            }
            group["dataset"] = describe_dataset(store, path, attributes);
            group
        }
        Ok(Some(NodeMetadata::Array(a))) => {
            let name = path.rsplit('/').next().unwrap_or(path);
            let axes = match parent.and_then(|image| image.level_of(name).filter(|_| image.axes.len() == a.shape.len()).map(|l| (image, l)))
            {
                Some((image, level)) => image.level_axes(level),
                None => Axes::named(a.dimension_names.as_deref(), a.shape.len()),
            };
            let names = a.dimension_names.clone().unwrap_or_default();
            let attributes = attributes_of(store.as_ref(), path, a);
            let fill = (a.format == ZarrFormat::V2).then(|| a.document.get("fill_value")).flatten();
            let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
            let geo = (!path.is_empty())
                .then(|| {
                    geo::georeference(&names, &a.shape, &attributes, geo::nodata(&attributes, fill), &mut StoreSiblings { store, parent })
                })
                .flatten();
            describe_array(store.as_ref(), path, a, &axes, geo.as_ref())
        }
        Ok(None) => {
            json!({"path": shown, "node_type": null, "problem": "no zarr.json, .zarray or .zgroup here"})
        }
        Err(e) => json!({"path": shown, "node_type": null, "problem": e.to_string()}),
    }
}

/// An array's attributes: v3 documents hold them, v2 arrays keep them in `.zattrs`.
fn attributes_of(store: &dyn Store, path: &str, a: &ArrayMetadata) -> Value {
    match a.format {
        ZarrFormat::V3 => a.document.attributes().map_or_else(|| json!({}), Attributes::to_value),
        ZarrFormat::V2 => v2_attributes(store, path).map_or_else(|_| json!({}), |a| a.to_value()),
    }
}

/// What the mount shows of an OME-NGFF image group: its `image.ome.tif`, or why there is none,
/// and the levels it leaves out.
fn describe_image(store: &dyn Store, path: &str, image: std::result::Result<Image, String>) -> Value {
    let image = match image {
        Ok(image) => image,
        Err(why) => return json!({"image.ome.tif": why}),
    };
    let arrays: Vec<std::result::Result<(DataType, Vec<u64>), String>> = image
        .levels
        .iter()
        .map(|l| match read_node(store, &store::join(path, &l.path)) {
            Ok(Some((NodeMetadata::Array(a), _))) => Ok((a.dtype.clone(), a.shape.clone())),
            Ok(Some(_)) => Err("a group, not an array".to_string()),
            Ok(None) => Err("no array there".to_string()),
            Err(e) => Err(e.to_string()),
        })
        .collect();
    let view = image.select(&arrays).and_then(|selection| {
        let shapes = selection.levels.iter().filter_map(|&i| arrays[i].as_ref().ok().map(|(_, s)| s.clone())).collect();
        let Some(Ok((dtype, _))) = arrays.first() else { return Err("level 0 cannot be read".to_string()) };
        let axes = image.level_axes(0);
        let name = image.name.clone().unwrap_or_else(|| path.rsplit('/').next().unwrap_or("").to_string());
        OmeTiff::new(&Pyramid { dtype, name: &name, axes: &axes, channels: &image.channels, shapes }).map(|_| selection)
    });
    let axes: Vec<Value> = image.axes.iter().map(|a| json!({"name": a.name, "unit": a.unit.map(|u| u.name)})).collect();
    match view {
        Ok(selection) => json!({
            "ome_version": image.version,
            "axes": axes,
            "image.ome.tif": true,
            "levels": selection.levels.iter().map(|&i| image.levels[i].path.clone()).collect::<Vec<_>>(),
            "levels_left_out": selection.left_out.iter().map(|(_, why)| why.clone()).collect::<Vec<_>>(),
        }),
        Err(why) => json!({"ome_version": image.version, "axes": axes, "image.ome.tif": why}),
    }
}

/// What the mount shows of a group as a dataset: its `dataset.nc` (the variables, what is left
/// out of it), or why there is none.
fn describe_dataset(store: &Arc<dyn Store>, path: &str, attributes: &Value) -> Value {
    let mut arrays = Vec::new();
    for e in store.list_dir(path).unwrap_or_default().into_iter().filter(|e| e.is_dir && !is_hidden(&e.name)) {
        let child = store::join(path, &e.name);
        if let Ok(Some((NodeMetadata::Array(a), _))) = read_node(store.as_ref(), &child) {
            let attributes = attributes_of(store.as_ref(), &child, &a);
            arrays.push((e.name, Array::new(store.clone(), &child, *a), attributes));
        }
    }
    // An int64 array's values, read from the store.
    let values: Vec<_> = arrays
        .iter()
        .map(|(_, array, _)| {
            move |missing: Option<i64>| {
                let mut range = None;
                let absent = array.visit_stored_elements(&mut |bytes| netcdf::widen(&mut range, bytes, missing)).ok()?;
                if absent {
                    netcdf::widen(&mut range, &array.meta.fill, missing);
                }
                Some(range)
            }
        })
        .collect();
    let sources: Vec<netcdf::Source> = arrays
        .iter()
        .zip(&values)
        .map(|((name, array, attributes), values)| netcdf::Source {
            name,
            dtype: &array.meta.dtype,
            shape: &array.meta.shape,
            dimension_names: array.meta.dimension_names.as_deref(),
            attributes,
            fill: (array.meta.format == ZarrFormat::V2).then(|| array.meta.document.get("fill_value")).flatten(),
            chunks: array.meta.chunk_count(),
            values: Some(values as &dyn Fn(Option<i64>) -> Option<netcdf::Int64Range>),
        })
        .collect();
    match netcdf::plan(attributes, &sources) {
        Ok(plan) => json!({
            "dataset.nc": true,
            "format": if plan.file.cdf5 { "CDF-5" } else { "CDF-2" },
            "variables": plan.sources.iter().map(|&i| sources[i].name).collect::<Vec<_>>(),
            "left_out": plan.left_out,
            "renamed": plan.renamed,
            "narrowed": plan.narrowed,
        }),
        Err(why) => json!({"dataset.nc": why}),
    }
}

/// The arrays of a group, read from the store, as `zarr::geo` asks for them.
struct StoreSiblings<'a> {
    store: &'a Arc<dyn Store>,
    parent: &'a str,
}

impl StoreSiblings<'_> {
    fn array(&self, name: &str) -> Option<Array> {
        match read_node(self.store.as_ref(), &store::join(self.parent, name)) {
            Ok(Some((NodeMetadata::Array(meta), _))) => Some(Array::new(self.store.clone(), &store::join(self.parent, name), *meta)),
            _ => None,
        }
    }
}

impl geo::Siblings for StoreSiblings<'_> {
    fn meta(&mut self, name: &str) -> Option<(Vec<u64>, Value)> {
        let a = self.array(name)?;
        Some((a.meta.shape.clone(), attributes_of(self.store.as_ref(), &store::join(self.parent, name), &a.meta)))
    }

    /// A 1-D array's values, chunk by chunk (absent chunks are fill).
    fn values(&mut self, name: &str) -> Option<Vec<f64>> {
        let a = self.array(name)?;
        let n = *a.meta.shape.first()?;
        let axis = a.meta.grid.axes.first()?;
        let item = a.meta.item_size();
        let mut bytes = Vec::with_capacity(n as usize * item);
        for c in 0..axis.chunks_for(n) {
            let len = axis.chunk_len(c) as usize * item;
            let chunk = match a.retrieve_chunk(&[c]).ok()? {
                Some((decoded, _)) => decoded,
                None => a.meta.fill.repeat(len / item.max(1)),
            };
            bytes.extend_from_slice(chunk.get(..len.min(chunk.len()))?);
        }
        bytes.truncate(n as usize * item);
        geo::values_of(&bytes, &a.meta.dtype)
    }
}

fn describe_array(store: &dyn Store, path: &str, a: &ArrayMetadata, axes: &Axes, geo: Option<&geo::Georeference>) -> Value {
    let chunk_shape: Vec<u64> = a.grid.axes.iter().map(|axis| axis.chunk_len(0)).collect();
    let chunks = a.shape.iter().zip(&a.grid.axes).fold(1u128, |n, (&extent, axis)| n.saturating_mul(u128::from(axis.chunks_for(extent))));
    let codecs = a.codecs.describe();
    // Sharded: the outer grid's cells are shards, of inner chunks of the codec's chunk shape.
    let inner = codecs.iter().find(|c| c["name"] == "sharding_indexed").map(|c| c["configuration"]["chunk_shape"].clone());
    let data_bytes = if a.dtype.is_variable() { None } else { Some(a.byte_len()) };
    let stored = store.usage(path, MOST_COUNTED).ok().flatten().map(|u| {
        // The documents are the node's own, not its data.
        let documents = crate::zarr::node::METADATA_DOCUMENTS
            .iter()
            .filter_map(|d| store.head(&store::join(path, d)).ok().flatten())
            .fold((0u64, 0u64), |(n, b), h| (n + 1, b + h.len));
        json!({"objects": u.values.saturating_sub(documents.0), "bytes": u.bytes.saturating_sub(documents.1), "complete": u.complete})
    });
    let ratio = match (data_bytes, &stored) {
        (Some(data), Some(s)) if s["complete"] == true && s["bytes"].as_u64().is_some_and(|b| b > 0) => {
            json!((data as f64 / s["bytes"].as_u64().unwrap_or(1) as f64 * 100.0).round() / 100.0)
        }
        _ => Value::Null,
    };
    let offset_encoded = matches!(a.key_encoding, ChunkKeyEncoding::Offset { .. });
    json!({
        "path": format!("/{path}"),
        "node_type": "array",
        "zarr_format": if a.format == ZarrFormat::V2 { 2 } else { 3 },
        "shape": a.shape,
        "dimension_names": a.dimension_names,
        "data_type": a.dtype.name(),
        "fill_value": a.document.get("fill_value").cloned().unwrap_or(Value::Null),
        "chunk_grid": a.grid.describe(),
        "chunk_shape": if a.grid.rectilinear { Value::Null } else { json!(chunk_shape) },
        "inner_chunk_shape": inner,
        "chunks": chunks.to_string(),
        "chunk_key_encoding": a.key_encoding.describe(),
        "codecs": codecs,
        // Variable-length arrays show text, whose size is known only once rendered.
        "data_bytes": data_bytes,
        "stored": stored,
        "ratio": ratio,
        // What a rewrite of the document through a mount may change in place.
        "edits": a.in_place_edits(),
        "prepend": store.prepend_refusal().or(a.prepend_refusal()).map_or(json!(true), Value::from),
        // Stock readers refuse the offset encoding: `zarrfs normalize` rewrites it away.
        "needs_normalize": offset_encoded,
        // Why writes are refused, when they are (a filter that would not give back what is written).
        "read_only": a.codecs.lossy(),
        // Each header view: shown (true), or why the format cannot express the array.
        "views": HeaderFormat::ALL
            .iter()
            .map(|f| (f.file_name().to_string(), f.layout(&a.dtype, &a.shape, axes, geo).map_or_else(Value::from, |_| Value::Bool(true))))
            .collect::<serde_json::Map<_, _>>(),
        "attributes": attributes_of(store, path, a),
    })
}

/// Every node under `path`, depth first. A `path` that names no node is an error.
fn collect(store: &Arc<dyn Store>, path: &str) -> Result<Vec<Value>> {
    let node = read_node(store.as_ref(), path).map(|n| n.map(|(meta, _)| meta));
    if matches!(node, Ok(None)) {
        return Err(if path.is_empty() {
            Error::metadata("not a Zarr store: no zarr.json, .zgroup or .zarray at its root")
        } else {
            Error::metadata(format!("no node at {path:?}: no zarr.json, .zarray or .zgroup there"))
        });
    }
    let mut out = Vec::new();
    // The node asked for may be a level of the image its parent is.
    let parent = match path.rsplit_once('/').map_or(if path.is_empty() { None } else { Some("") }, |(p, _)| Some(p)) {
        Some(p) => match read_node(store.as_ref(), p) {
            Ok(Some((NodeMetadata::Group(attributes), _))) => ome::find(&attributes.to_value()).and_then(|i| i.ok()),
            _ => None,
        },
        None => None,
    };
    walk(store, path, node, parent.as_ref(), &mut out)?;
    mark_coordinates(&mut out);
    Ok(out)
}

fn walk(
    store: &Arc<dyn Store>,
    path: &str,
    node: Result<Option<NodeMetadata>>,
    parent: Option<&Image>,
    out: &mut Vec<Value>,
) -> Result<()> {
    out.push(describe(store, path, &node, parent));
    let image = match &node {
        Ok(Some(NodeMetadata::Group(attributes))) => Some(ome::find(&attributes.to_value()).and_then(|i| i.ok())),
        _ => None,
    };
    if let Some(image) = image {
        for e in store.list_dir(path)? {
            if !e.is_dir || is_hidden(&e.name) {
                continue;
            }
            let child = store::join(path, &e.name);
            // A node that cannot be read is described with its problem.
            if is_node(store.as_ref(), &child).unwrap_or(true) {
                walk(store, &child, read_node(store.as_ref(), &child).map(|n| n.map(|(meta, _)| meta)), image.as_ref(), out)?;
            }
        }
    }
    Ok(())
}

/// Mark the 1-D arrays that are coordinates (the xarray convention): named like a dimension of
/// another array of the same group.
fn mark_coordinates(nodes: &mut [Value]) {
    let parent = |p: &str| p.rsplit_once('/').map_or(String::new(), |(dir, _)| dir.to_string());
    let mut users: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for n in nodes.iter() {
        let path = n["path"].as_str().unwrap_or("");
        for name in n["dimension_names"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            users.entry((parent(path), name.to_string())).or_default().push(path.rsplit('/').next().unwrap_or("").to_string());
        }
    }
    for n in nodes.iter_mut() {
        let path = n["path"].as_str().unwrap_or("").to_string();
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        if n["node_type"] != "array" || n["shape"].as_array().map(Vec::len) != Some(1) {
            continue;
        }
        if let Some(of) = users.get(&(parent(&path), name.clone())) {
            let of: Vec<&String> = of.iter().filter(|o| **o != name).collect();
            if !of.is_empty() {
                n["coordinate_of"] = json!(of);
            }
        }
    }
}

/// The text form: a line per group, a block per array.
fn render(nodes: &[Value], attributes: bool) -> String {
    let mut s = String::new();
    for n in nodes {
        let path = n["path"].as_str().unwrap_or("?");
        if let Some(p) = n.get("problem") {
            s.push_str(&format!("{path}  PROBLEM: {}\n", p.as_str().unwrap_or("")));
            continue;
        }
        if n["node_type"] == "group" {
            s.push_str(&format!("{path}  group\n"));
            if let Some(image) = n.get("image") {
                s.push_str(&render_image(image));
            }
            match &n["dataset"]["dataset.nc"] {
                Value::Bool(true) => s.push_str(&render_dataset(&n["dataset"])),
                // Said only of groups that hold a dataset's arrays.
                Value::String(why) if why != NO_DATASET => s.push_str(&format!("  {:<12}no dataset.nc: {why}\n", "views")),
                _ => {}
            }
            if attributes {
                push_attributes(&mut s, &n["attributes"]);
            }
            continue;
        }
        s.push_str(&render_array(n, attributes));
    }
    s
}

/// The lines of an image group: its OME-NGFF version and axes, its OME-TIFF and the levels
/// left out of it.
fn render_image(image: &Value) -> String {
    let mut s = String::new();
    let mut line = |label: &str, text: String| s.push_str(&format!("  {label:<12}{text}\n"));
    if let Some(version) = image["ome_version"].as_str() {
        let axes: Vec<String> = image["axes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| match a["unit"].as_str() {
                Some(unit) => format!("{} ({unit})", a["name"].as_str().unwrap_or("?")),
                None => a["name"].as_str().unwrap_or("?").to_string(),
            })
            .collect();
        line("image", format!("OME-NGFF {version}, axes {}", axes.join(", ")));
    }
    match &image["image.ome.tif"] {
        Value::Bool(true) => {
            let levels: Vec<&str> = image["levels"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            line("views", format!("image.ome.tif (levels {})", levels.join(", ")));
            for why in image["levels_left_out"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                line("", format!("level {why}: left out"));
            }
        }
        why => line("views", format!("no image.ome.tif: {}", why.as_str().unwrap_or("?"))),
    }
    s
}

/// The lines of a group that is a dataset: its `dataset.nc`, and what is left out of it.
fn render_dataset(dataset: &Value) -> String {
    let mut s = String::new();
    let variables: Vec<&str> = dataset["variables"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    s.push_str(&format!("  {:<12}dataset.nc ({}, {} variables)\n", "views", dataset["format"].as_str().unwrap_or("?"), variables.len()));
    // The names, a few to a line.
    let mut line = String::new();
    for name in variables {
        if !line.is_empty() && line.len() + name.len() > 90 {
            s.push_str(&format!("  {:<14}{line}\n", ""));
            line.clear();
        }
        line.push_str(name);
        line.push(' ');
    }
    if !line.is_empty() {
        s.push_str(&format!("  {:<14}{}\n", "", line.trim_end()));
    }
    for why in dataset["left_out"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        s.push_str(&format!("  {:<12}left out of dataset.nc: {why}\n", ""));
    }
    for name in dataset["renamed"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        s.push_str(&format!("  {:<12}named in dataset.nc: {name}\n", ""));
    }
    for held in dataset["narrowed"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        s.push_str(&format!("  {:<12}held in dataset.nc: {held}\n", ""));
    }
    s
}

fn render_array(n: &Value, attributes: bool) -> String {
    let mut s = format!("{}  array (Zarr v{})\n", n["path"].as_str().unwrap_or("?"), n["zarr_format"]);
    let mut line = |label: &str, text: String| s.push_str(&format!("  {label:<12}{text}\n"));
    let dims = |v: &Value| v.as_array().map(|a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" × ")).unwrap_or_default();
    let names: Vec<String> = n["dimension_names"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().map_or("-".to_string(), str::to_string)).collect())
        .unwrap_or_default();
    let shape = dims(&n["shape"]);
    line("shape", if names.is_empty() { shape } else { format!("{shape}  ({})", names.join(", ")) });
    line("data type", format!("{}, fill value {}", n["data_type"].as_str().unwrap_or("?"), n["fill_value"]));
    let grid = n["chunk_grid"].as_str().unwrap_or("?");
    let chunks = match n["chunk_shape"].as_array() {
        Some(_) => format!("{} ({} in all)", dims(&n["chunk_shape"]), n["chunks"].as_str().unwrap_or("?")),
        None => format!("{grid} ({} in all)", n["chunks"].as_str().unwrap_or("?")),
    };
    match n["inner_chunk_shape"].as_array() {
        Some(_) => {
            line("shards", chunks);
            line("chunks", format!("{} inside each shard", dims(&n["inner_chunk_shape"])));
        }
        None => line("chunks", chunks),
    }
    let mut keys = n["chunk_key_encoding"].as_str().unwrap_or("?").to_string();
    if n["needs_normalize"] == true {
        keys.push_str("  (stock readers need `zarrfs normalize`, or zarr-python with the zarrfs package)");
    }
    line("keys", keys);
    let codecs: Vec<Value> = n["codecs"].as_array().cloned().unwrap_or_default();
    let joined = codecs.iter().map(codec_text).collect::<Vec<_>>().join(" → ");
    if joined.chars().count() <= 64 {
        line("codecs", joined);
    } else {
        for (i, c) in codecs.iter().enumerate() {
            line(if i == 0 { "codecs" } else { "" }, codec_text(c));
            // A sharding codec's own chains, a line each.
            for (key, label) in [("codecs", "inner chunks"), ("index_codecs", "shard index")] {
                if let Some(chain) = c["configuration"][key].as_array() {
                    line("", format!("  {label}: {}", chain.iter().map(codec_text).collect::<Vec<_>>().join(" → ")));
                }
            }
        }
    }
    let size = match n["data_bytes"].as_u64() {
        Some(b) => format!("{} as data", human_bytes(b)),
        None => "text (variable-length elements)".to_string(),
    };
    let stored = match &n["stored"] {
        Value::Null => String::new(),
        st => {
            let at_least = if st["complete"] == true { "" } else { "at least " };
            let mut t = format!(
                "; {at_least}{} stored in {at_least}{} object(s)",
                human_bytes(st["bytes"].as_u64().unwrap_or(0)),
                st["objects"].as_u64().unwrap_or(0)
            );
            if let Some(r) = n["ratio"].as_f64() {
                t.push_str(&format!(", ratio {r}"));
            }
            t
        }
    };
    line("size", format!("{size}{stored}"));
    if let Some(views) = n["views"].as_object() {
        let (shown, absent): (Vec<_>, Vec<_>) = views.iter().partition(|(_, v)| v.as_bool() == Some(true));
        let shown: Vec<&str> = shown.iter().map(|(k, _)| k.as_str()).collect();
        line("views", if shown.is_empty() { "none".to_string() } else { shown.join(" ") });
        for (name, why) in absent {
            line("", format!("no {name}: {}", why.as_str().unwrap_or("?")));
        }
    }
    let edits: Vec<&str> = n["edits"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    line("edits", edits.join(", "));
    match n["prepend"].as_str() {
        None => line("prepend", "yes".to_string()),
        // The text keeps to one line: the whole reason is in --json.
        Some(why) if why.contains("zarrfs adopt") => line("prepend", "after `zarrfs adopt` (a metadata-only switch to offset)".into()),
        Some(why) => line("prepend", format!("no: {why}")),
    }
    if let Some(why) = n["read_only"].as_str() {
        line("read-only", why.to_string());
    }
    if let Some(of) = n["coordinate_of"].as_array() {
        line("coordinate", format!("of {}", of.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")));
    }
    if attributes {
        push_attributes(&mut s, &n["attributes"]);
    }
    s
}

/// `name(key=value, …)` for a codec; its nested codec chains (sharding's) are shown apart.
fn codec_text(c: &Value) -> String {
    let name = c["name"].as_str().unwrap_or("?");
    match c["configuration"].as_object() {
        Some(conf) if !conf.is_empty() => {
            let parts: Vec<String> = conf
                .iter()
                .filter(|(k, _)| *k != "codecs" && *k != "index_codecs")
                .map(|(k, v)| match v {
                    Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            format!("{name}({})", parts.join(", "))
        }
        _ => name.to_string(),
    }
}

fn push_attributes(s: &mut String, attributes: &Value) {
    match attributes.as_object() {
        Some(a) if !a.is_empty() => {
            s.push_str("  attributes\n");
            for (k, v) in a {
                let text = v.to_string();
                let text = if text.chars().count() > 80 { format!("{}…", text.chars().take(80).collect::<String>()) } else { text };
                s.push_str(&format!("    {k}: {text}\n"));
            }
        }
        _ => s.push_str("  attributes  none\n"),
    }
}
