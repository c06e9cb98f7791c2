//! Kerchunk's `gen` entries: references made from a key, URL, offset and length template over
//! the product of some dimensions (`{"key": "a/{{i}}", "url": "{{u}}", "offset": "{{i * 100}}",
//! "length": "100", "dimensions": {"i": {"stop": 10}}}`), as kerchunk renders them with jinja2.
//! Only what such templates use is understood: `{{ expression }}` with integers, names
//! (dimensions, then the set's templates), `+ - * // % ~`, parentheses and quoted strings.

use std::collections::HashMap;

/// The most references the `gen` entries of one set may make.
pub const MAX_GENERATED: u64 = 1 << 24;

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Int(i64),
    Str(String),
}

impl Val {
    fn text(&self) -> String {
        match self {
            Val::Int(i) => i.to_string(),
            Val::Str(s) => s.clone(),
        }
    }
}

/// One generated reference: its key, URL, and offset and length if the entry gives them.
pub struct Generated {
    pub key: String,
    pub url: String,
    pub range: Option<(u64, u64)>,
}

/// Every reference the `gen` entries make, in order, or why they cannot be read.
pub fn expand(entries: &[serde_json::Value], templates: &serde_json::Map<String, serde_json::Value>) -> Result<Vec<Generated>, String> {
    let templates: HashMap<String, Val> =
        templates.iter().filter_map(|(k, v)| Some((k.clone(), Val::Str(v.as_str()?.to_string())))).collect();
    let mut out = Vec::new();
    for entry in entries {
        let field = |name: &str| entry.get(name).and_then(|v| v.as_str());
        let key = field("key").ok_or_else(|| format!("a gen entry without a key: {entry}"))?;
        let url = field("url").ok_or_else(|| format!("a gen entry without a url: {entry}"))?;
        let (offset, length) = match (field("offset"), field("length")) {
            (Some(o), Some(l)) => (Some(o), Some(l)),
            (None, None) => (None, None),
            _ => return Err(format!("a gen entry with an offset or a length alone: {entry}")),
        };
        let dims = entry.get("dimensions").and_then(|d| d.as_object()).ok_or_else(|| format!("a gen entry without dimensions: {entry}"))?;
        let mut axes: Vec<(String, Vec<Val>)> = Vec::new();
        let mut count: u64 = 1;
        for (name, dim) in dims {
            let values = dimension(name, dim)?;
            count = count.saturating_mul(values.len() as u64);
            if out.len() as u64 + count > MAX_GENERATED {
                return Err(format!("gen entries make more than {MAX_GENERATED} references"));
            }
            axes.push((name.clone(), values));
        }
        let mut at = vec![0usize; axes.len()];
        if axes.iter().any(|(_, v)| v.is_empty()) {
            continue;
        }
        loop {
            let mut vars = templates.clone();
            for ((name, values), &i) in axes.iter().zip(&at) {
                vars.insert(name.clone(), values[i].clone());
            }
            let number = |t: &str, what: &str| -> Result<u64, String> {
                let text = render(t, &vars)?;
                text.trim().parse().map_err(|_| format!("gen {what} {t:?} renders {text:?}, not a whole number"))
            };
            let range = match (offset, length) {
                (Some(o), Some(l)) => Some((number(o, "offset")?, number(l, "length")?)),
                _ => None,
            };
            out.push(Generated { key: render(key, &vars)?, url: render(url, &vars)?, range });
            // The next combination, the last dimension fastest (itertools.product's order).
            let mut axis = axes.len();
            loop {
                if axis == 0 {
                    break;
                }
                axis -= 1;
                at[axis] += 1;
                if at[axis] < axes[axis].1.len() {
                    break;
                }
                at[axis] = 0;
            }
            if at.iter().all(|&i| i == 0) {
                break;
            }
        }
    }
    Ok(out)
}

/// A dimension's values: a list, or `{"start": 0, "stop": N, "step": 1}` as Python's range.
fn dimension(name: &str, dim: &serde_json::Value) -> Result<Vec<Val>, String> {
    if let Some(list) = dim.as_array() {
        return list
            .iter()
            .map(|v| match v {
                serde_json::Value::Number(n) => n.as_i64().map(Val::Int).ok_or_else(|| format!("dimension {name}: {n} is not an integer")),
                serde_json::Value::String(s) => Ok(Val::Str(s.clone())),
                other => Err(format!("dimension {name}: {other} is not a value")),
            })
            .collect();
    }
    let int = |k: &str, default: Option<i64>| {
        dim.get(k).map_or(default, |v| v.as_i64()).ok_or_else(|| format!("dimension {name}: no integer {k}"))
    };
    let (start, stop, step) = (int("start", Some(0))?, int("stop", None)?, int("step", Some(1))?);
    if step == 0 {
        return Err(format!("dimension {name}: a step of 0"));
    }
    let (span, stride) = if step > 0 { (stop.saturating_sub(start), step) } else { (start.saturating_sub(stop), step.saturating_neg()) };
    let n = (span.max(0) as u64).div_ceil(stride as u64);
    if n > MAX_GENERATED {
        return Err(format!("dimension {name}: more than {MAX_GENERATED} values"));
    }
    Ok((0..n as i64).map(|i| Val::Int(start + i * step)).collect())
}

/// `template` with each `{{ expression }}` replaced by its value.
fn render(template: &str, vars: &HashMap<String, Val>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let j = after.find("}}").ok_or_else(|| format!("{template}: an unclosed {{{{"))?;
        let mut p = Parser { text: &after.as_bytes()[..j], at: 0, vars, depth: 0 };
        let v = p.expr()?;
        p.space();
        if p.at != p.text.len() {
            return Err(format!("{template}: cannot read {:?}", &after[..j]));
        }
        out.push_str(&v.text());
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
    vars: &'a HashMap<String, Val>,
    /// Parentheses and signs open: bounded, so that no template exhausts the stack.
    depth: u32,
}

/// The most parentheses and signs an expression may nest.
const MAX_DEPTH: u32 = 64;

impl Parser<'_> {
    fn space(&mut self) {
        while self.text.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, op: &str) -> bool {
        self.space();
        if self.text[self.at..].starts_with(op.as_bytes()) {
            self.at += op.len();
            true
        } else {
            false
        }
    }

    /// jinja2's order: `+ -` bind least, then `~`, then `* // %`, then a sign.
    fn expr(&mut self) -> Result<Val, String> {
        let mut v = self.concat()?;
        loop {
            v = if self.eat("+") {
                match (v, self.concat()?) {
                    (Val::Int(a), Val::Int(b)) => Val::Int(a.checked_add(b).ok_or("an overflow")?),
                    (Val::Str(a), Val::Str(b)) => Val::Str(a + &b),
                    _ => return Err("+ of a number and a string".into()),
                }
            } else if self.eat("-") {
                Val::Int(int(v)?.checked_sub(int(self.concat()?)?).ok_or("an overflow")?)
            } else {
                return Ok(v);
            };
        }
    }

    fn concat(&mut self) -> Result<Val, String> {
        let mut v = self.term()?;
        while self.eat("~") {
            v = Val::Str(v.text() + &self.term()?.text());
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<Val, String> {
        let mut v = self.unary()?;
        loop {
            let (a, op) = if self.eat("*") {
                (int(v)?, '*')
            } else if self.eat("//") {
                (int(v)?, '/')
            } else if self.eat("%") {
                (int(v)?, '%')
            } else {
                return Ok(v);
            };
            let b = int(self.unary()?)?;
            // Python's floor division and modulo (the remainder takes the divisor's sign).
            let (q, r) = (a.checked_div(b), a.checked_rem(b));
            let floored = r.is_some_and(|r| r != 0 && (r < 0) != (b < 0));
            v = Val::Int(
                match op {
                    '*' => a.checked_mul(b),
                    '/' => q.map(|q| if floored { q - 1 } else { q }),
                    _ => r.map(|r| if floored { r + b } else { r }),
                }
                .ok_or("an overflow or a division by 0")?,
            );
        }
    }

    fn unary(&mut self) -> Result<Val, String> {
        if self.depth >= MAX_DEPTH {
            return Err(format!("more than {MAX_DEPTH} parentheses or signs nested"));
        }
        if self.eat("-") {
            self.depth += 1;
            let v = int(self.unary()?)?.checked_neg().ok_or("an overflow");
            self.depth -= 1;
            return Ok(Val::Int(v?));
        }
        if self.eat("(") {
            self.depth += 1;
            let v = self.expr()?;
            self.depth -= 1;
            return if self.eat(")") { Ok(v) } else { Err("an unclosed (".into()) };
        }
        self.space();
        let start = self.at;
        match self.text.get(self.at) {
            Some(q @ (b'\'' | b'"')) => {
                let q = *q;
                let end = self.text[start + 1..].iter().position(|&c| c == q).ok_or("an unclosed string")? + start + 1;
                self.at = end + 1;
                Ok(Val::Str(String::from_utf8_lossy(&self.text[start + 1..end]).into_owned()))
            }
            Some(c) if c.is_ascii_digit() => {
                while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
                    self.at += 1;
                }
                let digits = std::str::from_utf8(&self.text[start..self.at]).map_err(|e| e.to_string())?;
                digits.parse().map(Val::Int).map_err(|_| format!("{digits} is too large"))
            }
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                while self.text.get(self.at).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                    self.at += 1;
                }
                let name = std::str::from_utf8(&self.text[start..self.at]).map_err(|e| e.to_string())?;
                self.vars.get(name).cloned().ok_or_else(|| format!("no variable or template {name:?}"))
            }
            _ => Err("an expression expected".into()),
        }
    }
}

fn int(v: Val) -> Result<i64, String> {
    match v {
        Val::Int(i) => Ok(i),
        Val::Str(s) => Err(format!("{s:?} is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kerchunks_examples_render_as_jinja2_does() {
        let templates = json!({"u": "data.bin"});
        let entries = json!([{"key": "a/{{i}}.{{ j }}", "url": "{{u}}", "offset": "{{(i * 2 + j) * 100 + 8}}", "length": "100",
                          "dimensions": {"i": {"stop": 2}, "j": [0, 1]}},
                         {"key": "b/{{ n // 2 }}", "url": "file_{{'x' ~ n % 3}}.nc", "dimensions": {"n": {"start": 4, "stop": 0, "step": -2}}}]);
        let got = expand(entries.as_array().unwrap(), templates.as_object().unwrap()).unwrap();
        let shown: Vec<String> = got.into_iter().map(|g| format!("{} {} {:?}", g.key, g.url, g.range)).collect();
        let want: Vec<String> = [
            ("a/0.0".into(), "data.bin".into(), Some((8, 100))),
            ("a/0.1".into(), "data.bin".into(), Some((108, 100))),
            ("a/1.0".into(), "data.bin".into(), Some((208, 100))),
            ("a/1.1".into(), "data.bin".into(), Some((308, 100))),
            ("b/2".into(), "file_x1.nc".into(), None),
            ("b/1".into(), "file_x2.nc".into(), None),
        ]
        .iter()
        .map(|(k, u, r): &(String, String, Option<(u64, u64)>)| format!("{k} {u} {r:?}"))
        .collect();
        assert_eq!(shown, want);
        // Values jinja2 renders: `{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 'a' ~ 1 * 2 }} {{ 2 + 3 * 4 }}`.
        let vars = HashMap::new();
        assert_eq!(render("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 'a' ~ 1 * 2 }} {{ 2 + 3 * 4 }}", &vars).unwrap(), "-4 2 -2 a2 14");
        assert!(render("{{ 'a' ~ 1 + 2 }}", &vars).is_err());
        // Nesting is bounded: no template exhausts the stack.
        let deep = format!("{{{{{}1{}}}}}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(render(&deep, &vars).unwrap_err().contains("nested"));
        assert!(render(&format!("{{{{{}1}}}}", "-".repeat(100_000)), &vars).unwrap_err().contains("nested"));
        assert_eq!(render("{{ --((2)) }}", &vars).unwrap(), "2");
        for (bad, why) in [
            (json!([{"key": "k{{i}}", "url": "u", "dimensions": {"i": {"stop": 1 << 30}}}]), "more than"),
            (json!([{"key": "k{{i}}", "url": "u", "offset": "1", "dimensions": {"i": [1]}}]), "alone"),
            (json!([{"key": "k{{v}}", "url": "u", "dimensions": {"i": [1]}}]), "no variable"),
            (json!([{"key": "k{{i // 0}}", "url": "u", "dimensions": {"i": [1]}}]), "division"),
            (json!([{"key": "k{{i", "url": "u", "dimensions": {"i": [1]}}]), "unclosed"),
            (json!([{"key": "k", "url": "u", "offset": "{{'a'}}", "length": "1", "dimensions": {"i": [1]}}]), "not a whole number"),
            (json!([{"key": "k", "url": "u", "dimensions": {"i": {"stop": 3, "step": 0}}}]), "step of 0"),
        ] {
            let e = expand(bad.as_array().unwrap(), templates.as_object().unwrap()).err().unwrap();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
