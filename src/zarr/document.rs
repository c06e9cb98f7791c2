//! Node documents held compactly. A parse tree takes some 30 times the size of its JSON text,
//! and an attribute list may be tens of megabytes (a long history, a lookup table), so the
//! attributes are kept as the text of each top-level entry and parsed one entry at a time,
//! when a view asks for it. The other fields (shape, codecs, grid: what the mount works from)
//! are parsed.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::{Error, Result};

/// The largest attribute a view parses: larger ones are for the store's readers, not for
/// files a mount makes (a `dataset.nc` attribute holds 1 MiB at most).
pub const MAX_VIEW_ATTRIBUTE: usize = 1 << 20;

/// A JSON object's top-level entries, each as its text, in the order written (a later
/// duplicate replaces an earlier one in its place, as a parse into a map does). Clones share.
#[derive(Clone, Debug, Default)]
pub struct Attributes(Arc<[(String, Box<RawValue>)]>);

/// The entries of a JSON object, each value unparsed.
struct Entries(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Entries, D::Error> {
        struct Collect;
        impl<'de> Visitor<'de> for Collect {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Entries, A::Error> {
                let mut entries: Vec<(String, Box<RawValue>)> = Vec::new();
                let mut at: HashMap<String, usize> = HashMap::new();
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    match at.get(&key) {
                        Some(&i) => entries[i].1 = value,
                        None => {
                            at.insert(key.clone(), entries.len());
                            entries.push((key, value));
                        }
                    }
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Collect)
    }
}

fn entries_of(text: &[u8], what: &str) -> Result<Vec<(String, Box<RawValue>)>> {
    match serde_json::from_slice::<Entries>(text) {
        Ok(Entries(entries)) => Ok(entries),
        Err(e) if e.is_data() => Err(Error::metadata(format!("{what} is not a JSON object"))),
        Err(e) => Err(Error::metadata(format!("{what} is not valid JSON: {e}"))),
    }
}

fn raw(value: &Value) -> Box<RawValue> {
    // A Value always serialises, and its text is valid JSON.
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

impl Attributes {
    /// The attributes a JSON object's text holds.
    pub fn parse(text: &[u8], what: &str) -> Result<Attributes> {
        Ok(Attributes(entries_of(text, what)?.into()))
    }

    /// The attributes a parsed JSON object holds (`{}` for anything else).
    pub fn from_value(value: &Value) -> Attributes {
        let entries = value.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), raw(v))).collect::<Vec<_>>()).unwrap_or_default();
        Attributes(entries.into())
    }

    /// The bytes its text takes (names and values): what holding it costs.
    pub fn text_len(&self) -> u64 {
        self.0.iter().map(|(k, text)| (k.len() + text.get().len()) as u64).sum()
    }

    /// One attribute, parsed (`None`: there is none, or its text does not parse).
    pub fn get(&self, key: &str) -> Option<Value> {
        let (_, text) = self.0.iter().find(|(k, _)| k == key)?;
        serde_json::from_str(text.get()).ok()
    }

    /// What georeferencing and `dataset.nc` read: every attribute up to `MAX_VIEW_ATTRIBUTE`
    /// bytes of text, parsed. (An image's OME metadata is read whole: `ome` bounds what it
    /// takes of its levels and channels.)
    pub fn for_views(&self) -> Value {
        self.parsed(|text| text.len() <= MAX_VIEW_ATTRIBUTE)
    }

    /// Every attribute, parsed (what `zarrfs info` reports and a consolidated entry holds).
    pub fn to_value(&self) -> Value {
        self.parsed(|_| true)
    }

    fn parsed(&self, keep: impl Fn(&str) -> bool) -> Value {
        let entries = self.0.iter().filter(|(_, text)| keep(text.get()));
        Value::Object(entries.filter_map(|(k, text)| Some((k.clone(), serde_json::from_str(text.get()).ok()?))).collect())
    }
}

impl PartialEq for Attributes {
    /// The same entries in the same order, with the same values (the same text, or the same
    /// once parsed: spacing and number spelling aside).
    fn eq(&self, other: &Attributes) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(other.0.iter()).all(|((k, a), (l, b))| {
                k == l && (a.get() == b.get() || serde_json::from_str::<Value>(a.get()).ok() == serde_json::from_str::<Value>(b.get()).ok())
            })
    }
}

impl Serialize for Attributes {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, text) in self.0.iter() {
            map.serialize_entry(k, text)?;
        }
        map.end()
    }
}

/// A node document: its fields parsed, its `attributes` (when it has them) as `Attributes`
/// where they stood among the fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// Every field in the document's order; `attributes`, when present, as null.
    fields: Map<String, Value>,
    attributes: Option<Attributes>,
}

const ATTRIBUTES: &str = "attributes";

impl Document {
    /// The document a JSON object's text holds; `what` names it in errors.
    pub fn parse(text: &[u8], what: &str) -> Result<Document> {
        let mut fields = Map::new();
        let mut attributes = None;
        for (key, text) in entries_of(text, what)? {
            if key == ATTRIBUTES {
                attributes = Some(Attributes::parse(text.get().as_bytes(), &format!("{what}'s attributes"))?);
                fields.insert(key, Value::Null);
            } else {
                let value = serde_json::from_str(text.get()).map_err(|e| Error::metadata(format!("{what} is not valid JSON: {e}")))?;
                fields.insert(key, value);
            }
        }
        Ok(Document { fields, attributes })
    }

    /// The document a parsed JSON object holds.
    pub fn from_value(value: Value) -> Result<Document> {
        let Value::Object(mut fields) = value else { return Err(Error::metadata("a node document is not a JSON object")) };
        let attributes = match fields.get_mut(ATTRIBUTES) {
            None => None,
            Some(a) if a.is_object() => Some(Attributes::from_value(&std::mem::take(a))),
            Some(_) => return Err(Error::metadata("attributes must be a JSON object")),
        };
        Ok(Document { fields, attributes })
    }

    /// A field other than the attributes.
    pub fn get(&self, key: &str) -> Option<&Value> {
        if key == ATTRIBUTES { None } else { self.fields.get(key) }
    }

    /// The names of its fields, the attributes' among them.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }

    pub fn attributes(&self) -> Option<&Attributes> {
        self.attributes.as_ref()
    }

    /// The document after `edit` of its fields; the attributes are kept (shared, not copied).
    pub fn edited(&self, edit: impl FnOnce(&mut Value)) -> Document {
        let mut fields = Value::Object(self.fields.clone());
        edit(&mut fields);
        let Value::Object(mut fields) = fields else { return self.clone() };
        match &self.attributes {
            Some(_) => {
                fields.insert(ATTRIBUTES.into(), Value::Null);
            }
            None => {
                fields.remove(ATTRIBUTES);
            }
        }
        Document { fields, attributes: self.attributes.clone() }
    }

    /// The document with other attributes (`None`: none), where the old ones stood or last.
    pub fn with_attributes(&self, attributes: Option<Attributes>) -> Document {
        let mut fields = self.fields.clone();
        match attributes {
            Some(_) => {
                fields.entry(ATTRIBUTES).or_insert(Value::Null);
            }
            None => {
                fields.remove(ATTRIBUTES);
            }
        }
        Document { fields, attributes }
    }

    /// The whole document parsed (what a consolidated entry holds).
    pub fn to_value(&self) -> Value {
        let mut fields = self.fields.clone();
        if let (Some(a), Some(slot)) = (&self.attributes, fields.get_mut(ATTRIBUTES)) {
            *slot = a.to_value();
        }
        Value::Object(fields)
    }
}

/// The attributes' text goes out as it came in (`metadata::render_like` styles the rest).
impl Serialize for Document {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len()))?;
        for (k, v) in &self.fields {
            match (&self.attributes, k.as_str()) {
                (Some(a), ATTRIBUTES) => map.serialize_entry(k, a)?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attributes_keep_their_text_and_place() {
        let text = br#"{"zarr_format": 3, "attributes": {"b": [1, 2.50, "x"], "a": {"k": null}, "b": 7}, "shape": [4]}"#;
        let doc = Document::parse(text, "zarr.json").unwrap();
        assert_eq!(doc.keys().collect::<Vec<_>>(), ["zarr_format", "attributes", "shape"]);
        assert_eq!(doc.get("shape"), Some(&json!([4])));
        assert_eq!(doc.get("attributes"), None);
        let attributes = doc.attributes().unwrap();
        // A later duplicate replaces the earlier one where it stood.
        assert_eq!(attributes.to_value(), json!({"b": 7, "a": {"k": null}}));
        assert_eq!(attributes.get("a"), Some(json!({"k": null})));
        assert_eq!(attributes.get("c"), None);
        assert_eq!(serde_json::to_string(&doc).unwrap(), r#"{"zarr_format":3,"attributes":{"b":7,"a":{"k": null}},"shape":[4]}"#);
        assert_eq!(doc.to_value(), serde_json::from_slice::<Value>(text).unwrap());
        // An edit of the fields keeps the attributes as they were.
        let grown = doc.edited(|d| d["shape"] = json!([5]));
        assert_eq!(grown.to_value()["attributes"], json!({"b": 7, "a": {"k": null}}));
        assert_eq!(grown.get("shape"), Some(&json!([5])));
        assert_eq!(Document::from_value(doc.to_value()).unwrap(), doc);
    }

    #[test]
    fn large_attributes_stay_out_of_the_views() {
        let long = format!("[{}0]", "0,".repeat(MAX_VIEW_ATTRIBUTE / 2));
        let text = format!(r#"{{"long": {long}, "units": "K"}}"#);
        let attributes = Attributes::parse(text.as_bytes(), ".zattrs").unwrap();
        assert_eq!(attributes.for_views(), json!({"units": "K"}));
        assert_eq!(attributes.to_value()["long"].as_array().map(Vec::len), Some(MAX_VIEW_ATTRIBUTE / 2 + 1));
    }

    #[test]
    fn equal_attributes_may_be_spelled_apart() {
        let a = Attributes::parse(br#"{"x": 1.0, "y": [1,2]}"#, "a").unwrap();
        let b = Attributes::parse(br#"{"x": 1.0, "y": [ 1, 2 ]}"#, "b").unwrap();
        let c = Attributes::parse(br#"{"y": [1, 2], "x": 1.0}"#, "c").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(Attributes::parse(b"[1]", "d").is_err());
        assert!(Document::parse(br#"{"attributes": 3}"#, "zarr.json").is_err());
    }
}
