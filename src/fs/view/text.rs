//! `data` of variable-length (`string`, `bytes`) arrays: text, one element per line in C
//! order; in each element `\` is written `\\`, a newline `\n`, a carriage return `\r`, and a
//! byte that is not part of valid UTF-8 `\xHH` (in `string` arrays only a damaged store has
//! one). The text is rendered by bands (the chunks sharing an axis-0 index), cached, and indexed
//! by each band's length.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;

use super::{ReadPattern, Staged, View};
use crate::cache::{CacheKey, Cached, ChunkCache, KeyKind};
use crate::error::lock;
use crate::fs::context::Context;
use crate::fs::open::{OpenArray, TextIndex};
use crate::fs::spool::Spool;
use crate::limits::text_chunk_bound;
use crate::pool::WorkerPool;
use crate::zarr::array::Array;
use crate::zarr::dtype::DataType;
use crate::zarr::node::display_path;
use crate::zarr::region::IndexBox;
use crate::{Error, Result};

pub struct TextView;

impl View for TextView {
    /// The size is known once every band is rendered; it moves with every rewrite, which the
    /// kernel cannot predict.
    fn size(&self, cx: &Context, array: &Arc<OpenArray>) -> Result<(u64, bool)> {
        let index = index(array, &cx.cache, &cx.pool)
            .inspect_err(|e| tracing::error!(array = %display_path(&array.array().path), "the text view cannot be rendered: {e}"))?;
        Ok((index.len(), true))
    }

    fn read(&self, cx: &Context, array: &Arc<OpenArray>, _reads: Option<&ReadPattern>, offset: u64, size: u32) -> Result<Vec<u8>> {
        read(array, &cx.cache, &cx.pool, offset, size)
    }

    /// After a cut to zero, the new text; at the end, lines to append; anywhere else it cannot
    /// keep element boundaries (EOPNOTSUPP). (`append`: the file was opened O_APPEND, so every
    /// write goes at the end, whatever size the kernel thinks the text has.)
    fn write(&self, cx: &Context, array: &Arc<OpenArray>, staged: &Staged, offset: u64, data: &[u8], append: bool) -> Result<()> {
        let mut edit = lock(staged);
        if edit.is_none() {
            let size = index(array, &cx.cache, &cx.pool)?.len();
            if offset != size && !append {
                return Err(Error::Unsupported(
                    "writes into the middle of a text view cannot keep element boundaries: rewrite it (O_TRUNC) or append lines".into(),
                ));
            }
            *edit = Some(TextEdit { mode: TextMode::Append { base: size }, spool: cx.spool.create()? });
        }
        let Some(edit) = edit.as_mut() else { return Ok(()) };
        match edit.mode {
            TextMode::Append { .. } if append => {
                let end = edit.spool.len();
                edit.spool.write(end, data)
            }
            TextMode::Rewrite => edit.spool.write(offset, data),
            TextMode::Append { base } if offset >= base => edit.spool.write(offset - base, data),
            TextMode::Append { .. } => Err(Error::Unsupported("appended lines are written at the end".into())),
        }
    }

    /// Cut to zero, then rewritten (through a handle: the new text follows through it), or
    /// left as it is.
    fn truncate(&self, cx: &Context, array: &Arc<OpenArray>, staged: Option<&Staged>, size: u64) -> Result<()> {
        if size == index(array, &cx.cache, &cx.pool)?.len() {
            return Ok(());
        }
        if size != 0 {
            return Err(Error::Unsupported("a text view is cut to zero (and rewritten) or appended to, not cut elsewhere".into()));
        }
        match staged {
            Some(staged) => {
                *lock(staged) = Some(TextEdit { mode: TextMode::Rewrite, spool: cx.spool.create()? });
                Ok(())
            }
            None => store(cx, array, TextMode::Rewrite, None),
        }
    }

    fn commit(&self, cx: &Context, array: &Arc<OpenArray>, staged: TextEdit) -> Result<()> {
        store(cx, array, staged.mode, Some(&staged.spool))
    }
}

/// Store staged text (`None`: no text at all): the new elements, or the appended ones.
fn store(cx: &Context, array: &Arc<OpenArray>, mode: TextMode, staged: Option<&Spool>) -> Result<()> {
    let new_id = cx.next_id();
    let result = array.array().check_metadata_current().and_then(|()| match (mode, staged) {
        (TextMode::Rewrite, _) => rewrite(array, staged, new_id),
        (TextMode::Append { .. }, Some(staged)) => append(array, staged, new_id, cx.cache.capacity() as u64),
        (TextMode::Append { .. }, None) => Ok(()),
    });
    if let Err(e) = &result {
        tracing::warn!(array = %display_path(&array.array().path), "text refused: {e}");
    }
    // What the kernel cached is what was written, not necessarily how it renders now.
    cx.invalidate_data(array);
    result
}

/// Text written to `data` of a variable-length array, staged until close.
pub struct TextEdit {
    pub mode: TextMode,
    pub spool: Spool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextMode {
    /// After truncation to zero: the whole new text.
    Rewrite,
    /// Lines written at the end of the text, which was `base` bytes long.
    Append { base: u64 },
}

/// Append `element` escaped, and a newline. Bytes that are not UTF-8 are written `\xHH`, in
/// `string` arrays too (a damaged store): shown exactly, never replaced. Returns whether a
/// `string` element needed that.
pub fn escape(element: &[u8], bytes_type: bool, out: &mut Vec<u8>) -> bool {
    let mut damaged = false;
    let mut rest = element;
    while !rest.is_empty() {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s.len(), 0),
            Err(e) => (e.valid_up_to(), e.error_len().unwrap_or(rest.len() - e.valid_up_to())),
        };
        for &b in &rest[..valid] {
            match b {
                b'\\' => out.extend(b"\\\\"),
                b'\n' => out.extend(b"\\n"),
                b'\r' => out.extend(b"\\r"),
                _ => out.push(b),
            }
        }
        for &b in &rest[valid..valid + bad] {
            out.extend(format!("\\x{b:02x}").as_bytes());
            damaged |= !bytes_type;
        }
        rest = &rest[valid + bad..];
    }
    out.push(b'\n');
    damaged
}

/// One line of text back to an element. A malformed escape, or a `string` element that is not
/// UTF-8, is EINVAL.
pub fn unescape(line: &[u8], bytes_type: bool, number: usize) -> Result<Vec<u8>> {
    let bad = |what: &str| Error::Invalid(format!("line {}: {what}", number + 1));
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'\\' {
            out.push(line[i]);
            i += 1;
            continue;
        }
        match line.get(i + 1) {
            Some(b'\\') => out.push(b'\\'),
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(b'x') => {
                let hex = line.get(i + 2..i + 4).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(hex.ok_or_else(|| bad("\\x needs two hex digits"))?);
                i += 2;
            }
            Some(c) => return Err(bad(&format!("unknown escape \\{}", *c as char))),
            None => return Err(bad("a lone backslash at the end")),
        }
        i += 2;
    }
    if !bytes_type && std::str::from_utf8(&out).is_err() {
        return Err(bad("not valid UTF-8 in a string array"));
    }
    Ok(out)
}

fn is_bytes(array: &Array) -> bool {
    array.meta.dtype == DataType::Bytes
}

fn band_key(open: &OpenArray, band: u64) -> CacheKey {
    CacheKey { array: open.cache_id(), kind: KeyKind::Text, coords: vec![band].into() }
}

/// The rows of band `band`, clipped to the array.
fn band_rows(array: &Array, band: u64) -> (u64, u64) {
    let grid = &array.meta.grid;
    let start = grid.chunk_start(0, band);
    (start, (start + grid.chunk_len(0, band)).min(array.meta.shape[0]))
}

/// A chunk's coordinates and its elements.
type ChunkElements = (Vec<u64>, Vec<Vec<u8>>);

/// Every element of the chunks of a band, by chunk coordinates (fill for missing chunks); a
/// chunk decodes to no more than `limits::text_chunk_bound` for a cache of `cache` bytes.
fn band_elements(array: &Array, band: u64, cache: u64) -> Result<Vec<ChunkElements>> {
    let meta = &array.meta;
    let grid_shape = meta.grid.grid_shape(&meta.shape);
    IndexBox::band(&grid_shape, band, band + 1)
        .indices()
        .into_iter()
        .map(|c| {
            let n = meta.grid.chunk_shape(&c).iter().product::<u64>();
            let elements = match array.retrieve_elements(&c, text_chunk_bound(n, cache))? {
                Some(elements) => elements,
                None => vec![meta.fill.clone(); n as usize],
            };
            Ok((c, elements))
        })
        .collect()
}

/// The element at `index` (array coordinates) among a band's decoded chunks.
fn element_at<'a>(array: &Array, chunks: &'a [ChunkElements], by_coords: &HashMap<&[u64], usize>, index: &[u64]) -> &'a [u8] {
    let grid = &array.meta.grid;
    let (coords, local): (Vec<u64>, Vec<u64>) = index.iter().enumerate().map(|(a, &i)| grid.chunk_of(a, i)).unzip();
    let Some((c, elements)) = by_coords.get(coords.as_slice()).map(|&i| &chunks[i]) else { return &[] };
    let shape = grid.chunk_shape(c);
    let flat = local.iter().zip(&shape).fold(0u64, |acc, (l, s)| acc * s + l) as usize;
    elements.get(flat).map_or(&[], |e| &e[..])
}

/// The text of one band, through the cache.
fn band_text(open: &OpenArray, array: &Array, cache: &ChunkCache, band: u64) -> Result<Arc<Cached>> {
    cache.get_or_load(&band_key(open, band), || {
        let meta = &array.meta;
        let mut out = Vec::new();
        let mut damaged = 0usize;
        let warn = |damaged: usize| {
            if damaged > 0 {
                tracing::warn!(array = %display_path(&array.path), band, "{damaged} string elements are not UTF-8: shown with \\xHH escapes");
            }
        };
        if meta.shape.is_empty() {
            let elements = array.retrieve_elements(&[], text_chunk_bound(1, cache.capacity() as u64))?.unwrap_or_else(|| vec![meta.fill.clone()]);
            warn(usize::from(escape(elements.first().map_or(&[][..], |e| &e[..]), is_bytes(array), &mut out)));
            return Ok(Cached::Text(out));
        }
        let chunks = band_elements(array, band, cache.capacity() as u64)?;
        let by_coords: HashMap<&[u64], usize> = chunks.iter().enumerate().map(|(i, (c, _))| (c.as_slice(), i)).collect();
        let (r0, r1) = band_rows(array, band);
        IndexBox::band(&meta.shape, r0, r1).for_each(|index| {
            damaged += usize::from(escape(element_at(array, &chunks, &by_coords, index), is_bytes(array), &mut out));
        });
        warn(damaged);
        Ok(Cached::Text(out))
    })
}

fn bands(array: &Array) -> u64 {
    if array.meta.shape.is_empty() { 1 } else { array.meta.grid.grid_shape(&array.meta.shape)[0] }
}

/// The text's layout, rendering every band once (in parallel) when it is not known yet. A band
/// that cannot be rendered (a damaged chunk) is logged and stands as one empty line per element:
/// only its lines fail to read.
fn index(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool) -> Result<Arc<TextIndex>> {
    if let Some(ix) = lock(&open.text).clone() {
        return Ok(ix);
    }
    let array = open.array();
    let n = bands(&array);
    for band in 1..n {
        let (open2, cache2) = (open.clone(), cache.clone());
        pool.submit(move || {
            let _ = band_text(&open2, &open2.array(), &cache2, band);
        });
    }
    let mut ends = Vec::with_capacity(n as usize);
    let mut damaged = Vec::with_capacity(n as usize);
    let mut total = 0u64;
    for band in 0..n {
        let len = match band_text(open, &array, cache, band) {
            Ok(text) => match text.as_ref() {
                Cached::Text(t) => t.len() as u64,
                _ => 0,
            },
            Err(e) => {
                tracing::error!(array = %display_path(&array.path), band, "lines of the text cannot be rendered: {e}");
                damaged.push(true);
                ends.push(total + band_elements_count(&array, band));
                total = *ends.last().unwrap_or(&0);
                continue;
            }
        };
        total += len;
        ends.push(total);
        damaged.push(false);
    }
    let ix = Arc::new(TextIndex { ends, damaged });
    *lock(&open.text) = Some(ix.clone());
    Ok(ix)
}

/// The elements of band `band`: its lines.
fn band_elements_count(array: &Array, band: u64) -> u64 {
    if array.meta.shape.is_empty() {
        return 1;
    }
    let (r0, r1) = band_rows(array, band);
    (r1 - r0) * array.meta.shape[1..].iter().product::<u64>()
}

/// Bytes `offset .. offset + size` of the text. A read that reaches a damaged band stops short
/// of the page its bytes begin in; one that starts in that page fails.
fn read(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, offset: u64, size: u32) -> Result<Vec<u8>> {
    const PAGE: u64 = 4096;
    let _shared = open.shared();
    let ix = index(open, cache, pool)?;
    let array = open.array();
    let end = (offset + u64::from(size)).min(ix.len());
    let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
    let mut band = ix.ends.partition_point(|&e| e <= offset);
    while (out.len() as u64) < end.saturating_sub(offset) && band < ix.ends.len() {
        let start = if band == 0 { 0 } else { ix.ends[band - 1] };
        match (band_text(open, &array, cache, band as u64), ix.damaged[band]) {
            (Ok(text), false) => {
                if let Cached::Text(t) = text.as_ref() {
                    let from = (offset.max(start) - start) as usize;
                    let to = ((end - start) as usize).min(t.len());
                    out.extend(&t[from.min(to)..to]);
                }
            }
            // Rendered now, but not at the length the layout gave it: the layout is what readers
            // were told, so the band stays failed until the text is laid out again.
            (result, _) => {
                let page = start / PAGE * PAGE;
                if offset >= page {
                    return Err(result
                        .err()
                        .unwrap_or_else(|| Error::corrupt(display_path(&array.path), "a band of the text could not be rendered")));
                }
                out.truncate((page - offset) as usize);
                return Ok(out);
            }
        }
        band += 1;
    }
    Ok(out)
}

/// The elements of staged text, one per line (a last line without a newline counts),
/// unescaped as they are read: a rewrite of any size holds one line at a time.
struct Lines<'a> {
    reader: Box<dyn BufRead + 'a>,
    bytes_type: bool,
    number: usize,
}

impl Iterator for Lines<'_> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Result<Vec<u8>>> {
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => None,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                self.number += 1;
                Some(unescape(&line, self.bytes_type, self.number - 1))
            }
            Err(e) => Some(Err(e.into())),
        }
    }
}

/// The staged text (`None`: empty) as elements.
fn lines(text: Option<&Spool>, bytes_type: bool) -> Lines<'_> {
    let reader: Box<dyn BufRead> = match text {
        Some(spool) => Box::new(std::io::BufReader::with_capacity(1 << 20, spool.reader())),
        None => Box::new(std::io::empty()),
    };
    Lines { reader, bytes_type, number: 0 }
}

/// How many elements the staged text holds, every line checked first: a malformed line
/// fails the rewrite before anything is stored.
fn count(text: Option<&Spool>, bytes_type: bool) -> Result<u64> {
    lines(text, bytes_type).try_fold(0u64, |n, line| line.map(|_| n + 1))
}

/// Replace the array's elements with the staged text (C order): a 1-D array takes its line
/// count as its length; any other must get exactly its element count. Every chunk is written
/// (or deleted when all fill), chunks past a shorter end are deleted, then the metadata.
fn rewrite(open: &Arc<OpenArray>, text: Option<&Spool>, new_cache_id: u64) -> Result<()> {
    let _writer = open.writer();
    let _exclusive = open.exclusive();
    let old = open.array();
    let meta = &old.meta;
    let bytes_type = is_bytes(&old);
    let lines_count = count(text, bytes_type)?;
    let elements_count: u64 = meta.shape.iter().product();
    let array = match meta.shape.len() {
        1 if lines_count != elements_count => {
            let mut edits = lock(&open.edits);
            open.set_shape(&mut edits, &[lines_count])?
        }
        _ if lines_count != elements_count => {
            return Err(Error::Invalid(format!("{lines_count} lines for an array of {elements_count} elements ({:?})", meta.shape)));
        }
        _ => old.clone(),
    };
    let mut keys = Vec::new();
    let stored = store_from(&array, &mut lines(text, bytes_type), 0, &mut keys).and_then(|()| match meta.shape.len() {
        1 => old.for_each_chunk_outside(lines_count, &mut |coords| old.delete_chunk(coords).map(|d| keys.push(d.key))),
        _ => Ok(()),
    });
    finish(open, &array, new_cache_id, keys, stored)
}

/// Append the staged lines to a 1-D array. The array grows only once every chunk is stored: an
/// append that fails leaves the old length, whose elements it did not change (the chunk the old
/// end cuts through keeps its first ones; what it stored past the old end is not shown, and the
/// next growth writes over it or resets it to fill).
fn append(open: &Arc<OpenArray>, text: &Spool, new_cache_id: u64, cache_capacity: u64) -> Result<()> {
    let _writer = open.writer();
    let _exclusive = open.exclusive();
    let old = open.array();
    if old.meta.shape.len() != 1 {
        return Err(Error::Invalid(format!("lines can be appended to 1-D arrays only; this one is {:?}", old.meta.shape)));
    }
    let added = count(Some(text), is_bytes(&old))?;
    if added == 0 {
        return Ok(());
    }
    let n = old.meta.shape[0];
    let array = open.reshaped(&[n + added])?;
    // The chunk the old end cuts through keeps its first elements.
    let (first, offset) = array.meta.grid.chunk_of(0, n);
    let elements = array.meta.grid.chunk_shape(&[first]).iter().product::<u64>();
    let bound = text_chunk_bound(elements, cache_capacity);
    let mut kept = if offset == 0 { Vec::new() } else { array.retrieve_elements(&[first], bound)?.unwrap_or_default() };
    kept.truncate(offset as usize);
    kept.resize(offset as usize, array.meta.fill.clone());
    let mut elements = kept.into_iter().map(Ok).chain(lines(Some(text), is_bytes(&old)));
    let mut keys = Vec::new();
    let stored = store_from(&array, &mut elements, array.meta.grid.chunk_start(0, first), &mut keys);
    if stored.is_err() {
        return finish(open, &old, new_cache_id, keys, stored);
    }
    open.set_reshaped(&mut lock(&open.edits), array.clone());
    finish(open, &array, new_cache_id, keys, stored)
}

/// Store the chunks holding `elements`, which start at flat element `start` (the start of a
/// band), band by band: memory holds one band's elements at a time. The keys written are added
/// to `keys`.
fn store_from(array: &Array, elements: &mut dyn Iterator<Item = Result<Vec<u8>>>, start: u64, keys: &mut Vec<String>) -> Result<()> {
    let meta = &array.meta;
    if meta.shape.is_empty() {
        let first = elements.take(1).collect::<Result<Vec<_>>>()?;
        keys.push(array.store_elements(&[], &first)?);
        return Ok(());
    }
    let grid = &meta.grid;
    let grid_shape = grid.grid_shape(&meta.shape);
    if grid_shape.contains(&0) {
        return Ok(());
    }
    let strides = crate::zarr::region::c_strides(&meta.shape);
    for band in grid.chunk_of(0, start / strides[0]).0..grid_shape[0] {
        let (first_row, end_row) = band_rows(array, band);
        let band_start = first_row * strides[0];
        let band_elements = elements.take(((end_row - first_row) * strides[0]) as usize).collect::<Result<Vec<_>>>()?;
        let mut result = Ok(());
        IndexBox::band(&grid_shape, band, band + 1).for_each(|coords| {
            if result.is_err() {
                return;
            }
            let mut chunk = Vec::with_capacity(grid.chunk_shape(coords).iter().product::<u64>() as usize);
            IndexBox::of_region(&grid.cell_region(coords)).for_each(|index| {
                let inside = index.iter().zip(&meta.shape).all(|(i, n)| i < n);
                let flat = index.iter().zip(&strides).map(|(i, s)| i * s).sum::<u64>();
                let element = if inside { band_elements.get((flat - band_start) as usize) } else { None };
                chunk.push(element.cloned().unwrap_or_else(|| meta.fill.clone()));
            });
            result = array.store_elements(coords, &chunk).map(|key| keys.push(key));
        });
        result?;
    }
    Ok(())
}

/// After a rewrite or an append has stored its chunks (`stored` says whether all of them): what
/// the store now holds is served under a fresh cache id and text layout (cached chunks and
/// bands may be the old ones), the keys written wait for the next fsync, and then the metadata
/// is stored. It stays marked changed until it is, so that a failed store is tried again at the
/// next flush (and a metadata re-check does not take the store's older document for another
/// writer's).
fn finish(open: &Arc<OpenArray>, array: &Arc<Array>, new_cache_id: u64, keys: Vec<String>, stored: Result<()>) -> Result<()> {
    open.replace(array.clone(), new_cache_id);
    *lock(&open.text) = None;
    lock(&open.edits).unsynced.extend(keys);
    stored?;
    if open.metadata_dirty() {
        let touched = array.store_metadata()?;
        let mut edits = lock(&open.edits);
        edits.unsynced.extend(touched.keys);
        edits.metadata_dirty = false;
    }
    Ok(())
}
