//! Every input of the committed fuzz corpora (`fuzz/corpus/TARGET`) through its target's own
//! check, so that what fuzzing once reached is run again by every `cargo test`; `scripts/fuzz`
//! explores for new inputs.

#[path = "../fuzz/checks/chunk.rs"]
mod chunk;
#[path = "../fuzz/checks/metadata.rs"]
mod metadata;
#[path = "../fuzz/checks/rectilinear.rs"]
mod rectilinear;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        // A panic names the input, to run again with `cargo fuzz run TARGET PATH`.
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            panic!("{target}: the input {} fails its check", path.display());
        }
        inputs += 1;
    }
    assert!(inputs > 100, "{target}: only {inputs} inputs in {}", dir.display());
}

#[test]
fn the_metadata_corpus_passes_its_checks() {
    replay("metadata", metadata::check);
}

#[test]
fn the_chunk_corpus_passes_its_checks() {
    replay("chunk", chunk::check);
}

#[test]
fn the_rectilinear_corpus_passes_its_checks() {
    replay("rectilinear", rectilinear::check);
}
