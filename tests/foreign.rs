//! Stores other tools wrote (tests/fixtures/foreign, from scripts/make-foreign-fixtures), read
//! through a real mount as their writer reads them, and written back so that the next mount
//! reads what was written. (Those zarr-python reads are compared by scripts/check-interop.py
//! and scripts/check-writes.py.)

mod common;

use std::os::unix::fs::FileExt;

use common::{Mount, copy_store, fixtures};

#[test]
fn gdals_lzma_arrays_read_as_gdal_reads_them_and_take_writes() {
    let foreign = fixtures().join("foreign");
    let (_dir, store) = copy_store(&foreign.join("gdal_lzma.zarr"));
    let m = Mount::new(&store, &[]);
    for array in ["delta1", "delta2"] {
        let want = std::fs::read(foreign.join("expected/gdal_lzma").join(format!("{array}.bin"))).unwrap();
        assert_eq!(std::fs::read(m.path(&format!("{array}/data"))).unwrap(), want, "{array}");
    }
    // A write across chunks, stored in GDAL's form ({"delta": 2}: a delta filter in the stream).
    let f = std::fs::OpenOptions::new().write(true).open(m.path("delta2/data")).unwrap();
    f.write_at(&[1, 2, 3, 4, 5, 6], 2).unwrap();
    f.sync_all().unwrap();
    drop(f);
    drop(m);
    let m = Mount::new(&store, &["--read-only"]);
    let mut want = std::fs::read(foreign.join("expected/gdal_lzma/delta2.bin")).unwrap();
    want[2..8].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
    assert_eq!(std::fs::read(m.path("delta2/data")).unwrap(), want);
    let chunk = std::fs::read(store.join("delta2/0.1")).unwrap();
    assert_eq!(&chunk[..6], b"\xfd7zXZ\0", "an xz stream, as GDAL writes");
}
