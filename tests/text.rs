//! Variable-length arrays as text through a mount: rewrites, appends and what is refused.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::process::Command;

use common::{Mount, copy_store, fixtures, snapshot, write_and_close};

fn rewrite() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).truncate(true);
    o
}

fn append() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.append(true);
    o
}

#[test]
fn rewrites_and_appends_read_back_after_a_remount() {
    let (_dir, store) = copy_store(&fixtures().join("vlen.zarr"));
    let new_1d = "one\n\ntwo\\\\three\nfour\\nlines\nütf ✓\n";
    let new_2d = (0..12).map(|i| format!("e{i}\n")).collect::<String>();
    // NUL is valid UTF-8: it reads back as itself, only 0xff stays escaped.
    let bytes = "raw\\xff\\x00end\nplain\n";
    let bytes_shown = "raw\\xff\0end\nplain\n";
    {
        let m = Mount::new(&store, &[]);
        // 1-D: resized to the line count.
        write_and_close(&m.path("strings_1d/data"), &rewrite(), new_1d.as_bytes()).unwrap();
        assert_eq!(std::fs::read_to_string(m.path("strings_1d/data")).unwrap(), new_1d);
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path("strings_1d/zarr.json")).unwrap()).unwrap();
        assert_eq!(doc["shape"], serde_json::json!([5]));
        // Appending lines grows a 1-D array.
        let out = Command::new("sh").arg("-c").arg(format!("echo 'five' >> {}", m.path("strings_1d/data").display())).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // N-D: the line count must be the element count.
        write_and_close(&m.path("strings_2d/data"), &rewrite(), new_2d.as_bytes()).unwrap();
        // bytes: \xHH for bytes that are not UTF-8.
        write_and_close(&m.path("bytes_1d/data"), &rewrite(), bytes.as_bytes()).unwrap();
        // v2 |O + vlen-utf8 + zstd.
        write_and_close(&m.path("v2/strings/data"), &rewrite(), b"a\nb\n").unwrap();
    }
    let m = Mount::new(&store, &[]);
    assert_eq!(std::fs::read_to_string(m.path("strings_1d/data")).unwrap(), format!("{new_1d}five\n"));
    assert_eq!(std::fs::read_to_string(m.path("strings_2d/data")).unwrap(), new_2d);
    assert_eq!(std::fs::read_to_string(m.path("bytes_1d/data")).unwrap(), bytes_shown);
    assert_eq!(std::fs::read_to_string(m.path("v2/strings/data")).unwrap(), "a\nb\n");
}

#[test]
fn zarrs_codecs_are_rewritten_with_their_own_codecs() {
    let (_dir, store) = copy_store(&fixtures().join("zarrs-vlen"));
    let text = "x\ny\\\\z\n\n";
    {
        let m = Mount::new(&store, &[]);
        for array in ["zarrs_vlen_u32", "zarrs_vlen_u64", "zarrs_vlen_v2", "vlen_utf8"] {
            write_and_close(&m.path(array).join("data"), &rewrite(), text.as_bytes()).unwrap_or_else(|e| panic!("{array}: {e}"));
        }
    }
    let m = Mount::new(&store, &[]);
    for array in ["zarrs_vlen_u32", "zarrs_vlen_u64", "zarrs_vlen_v2", "vlen_utf8"] {
        assert_eq!(std::fs::read_to_string(m.path(array).join("data")).unwrap(), text, "{array}");
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path(array).join("zarr.json")).unwrap()).unwrap();
        assert_eq!(doc["shape"], serde_json::json!([3]), "{array}");
    }
}

#[test]
fn bad_text_is_refused_and_changes_nothing() {
    let (_dir, store) = copy_store(&fixtures().join("vlen.zarr"));
    let before = snapshot(&store);
    {
        let m = Mount::new(&store, &[]);
        let einval = |array: &str, opts: &OpenOptions, text: &[u8]| {
            let err = write_and_close(&m.path(array).join("data"), opts, text).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{array}: {:?}", String::from_utf8_lossy(text));
        };
        einval("strings_1d", &rewrite(), b"fine\nbad \\q escape\n");
        einval("strings_1d", &rewrite(), b"dangling\\");
        einval("strings_1d", &rewrite(), b"not \xff utf-8\n");
        einval("strings_1d", &rewrite(), b"no \\xff in strings\n");
        einval("bytes_1d", &rewrite(), b"short \\x4\n");
        einval("strings_2d", &rewrite(), b"too\nfew\n");
        einval("strings_2d", &append(), b"more\n");
        // Writes into the middle cannot keep element boundaries.
        let f = OpenOptions::new().write(true).open(m.path("strings_1d/data")).unwrap();
        assert_eq!(f.write_at(b"x", 2).unwrap_err().raw_os_error(), Some(libc::EOPNOTSUPP));
        let expected = std::fs::read(fixtures().join("expected/vlen.zarr/strings_1d.bin")).unwrap();
        assert_eq!(std::fs::read(m.path("strings_1d/data")).unwrap(), expected, "the mount shows the old text");
    }
    assert_eq!(snapshot(&store), before, "the store is unchanged");
}

#[test]
fn a_large_rewrite_is_streamed_not_held_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.zarr");
    std::fs::create_dir_all(store.join("words")).unwrap();
    std::fs::write(store.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let doc = serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": [1], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [65536]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "", "codecs": [{"name": "vlen-utf8"}, {"name": "zstd", "configuration": {"level": 1}}]});
    std::fs::write(store.join("words/zarr.json"), doc.to_string()).unwrap();
    let m = Mount::new(&store, &["--cache-size", "16M", "--dirty-limit", "16M"]);
    // 2 Mi lines, 32 MiB of text: held whole with its elements it would take over 100 MiB.
    let lines = 2u64 << 20;
    let line = |i: u64| format!("word {i:010}\n");
    let file = rewrite().open(m.path("words/data")).unwrap();
    let mut at = 0u64;
    let mut block = String::new();
    for i in 0..lines {
        block.push_str(&line(i));
        if block.len() >= 1 << 20 || i + 1 == lines {
            file.write_all_at(block.as_bytes(), at).unwrap();
            at += block.len() as u64;
            block.clear();
        }
    }
    drop(file);
    let peak = m.peak_rss();
    // Alone it peaks near 34 MiB; on a loaded machine the stores lag behind the writer and
    // changes wait up to the dirty limit (16 MiB), beside the cache (16 MiB): 48 MiB was seen.
    assert!(peak < 64 << 20, "a 32 MiB rewrite peaked at {} MiB", peak >> 20);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path("words/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["shape"], serde_json::json!([lines]));
    let file = std::fs::File::open(m.path("words/data")).unwrap();
    for i in [0, 65535, 65536, lines - 1] {
        let mut buf = vec![0u8; 16];
        file.read_exact_at(&mut buf, i * 16).unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), line(i));
    }
}
