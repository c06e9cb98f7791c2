//! Header views through real mounts: `data.npy` is its header and then the bytes of `data`;
//! the sidecars name `data` with its type and shape; writes through `data.npy` are writes to
//! the array, header changes and resizes are refused; views follow a growth; `views=` chooses.

mod common;

use std::os::unix::fs::{FileExt, MetadataExt};

use common::{Mount, copy_store, expected, fixtures};

/// The npy header's dictionary, as text.
fn npy_dict(npy: &[u8]) -> String {
    assert_eq!(&npy[..8], b"\x93NUMPY\x01\x00", "npy magic and version 1.0");
    let len = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    assert_eq!(10 + len, 4096, "the data starts at 4096");
    String::from_utf8(npy[10..10 + len].to_vec()).unwrap()
}

fn tuple(shape: &[u64]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

#[test]
fn every_view_of_every_fixture_shows_the_arrays_bytes_type_and_shape() {
    for store in ["v3.zarr", "v2.zarr"] {
        let m = Mount::new(&fixtures().join(store), &[]);
        for e in expected().into_iter().filter(|e| e.store == store && e.bad_ranges.is_empty() && !e.bytes.is_empty()) {
            let dir = m.path(&e.path);
            let views = e.views();
            for name in ["data.npy", "data.tif", "data.nii", "data.hdr", "data.raw.nhdr", "data.mhd"] {
                assert_eq!(dir.join(name).exists(), views.contains(&name), "{store}/{}: {name}", e.path);
            }
            let npy = std::fs::read(dir.join("data.npy")).unwrap();
            assert!(npy[4096..] == e.bytes[..], "{store}/{}: data.npy differs from data", e.path);
            let dict = npy_dict(&npy);
            assert!(dict.contains(&format!("'fortran_order': False, 'shape': {}, }}", tuple(&e.shape))), "{}: {dict}", e.path);
            assert!(dict.ends_with(" \n"));
            // Only the header counts as the view's own blocks: `du` counts the array once.
            assert_eq!(std::fs::metadata(dir.join("data.npy")).unwrap().blocks(), 8, "{}", e.path);
            let fastest_first = e.shape.iter().rev().map(u64::to_string).collect::<Vec<_>>().join(" ");
            if views.contains(&"data.raw.nhdr") {
                let nhdr = std::fs::read_to_string(dir.join("data.raw.nhdr")).unwrap();
                assert!(nhdr.contains(&format!("sizes: {fastest_first}\n")) && nhdr.ends_with("data file: data\n"), "{nhdr}");
                let mhd = std::fs::read_to_string(dir.join("data.mhd")).unwrap();
                // ITK reads 2 dimensions or more: a line is N x 1.
                let sizes = if e.shape.len() == 1 { format!("{fastest_first} 1") } else { fastest_first.clone() };
                assert!(mhd.contains(&format!("DimSize = {sizes}\n")) && mhd.ends_with("ElementDataFile = data\n"), "{mhd}");
            }
            for carrier in ["data.tif", "data.nii"].into_iter().filter(|v| views.contains(v)) {
                let bytes = std::fs::read(dir.join(carrier)).unwrap();
                assert!(bytes[4096..4096 + e.bytes.len()] == e.bytes[..], "{store}/{}: {carrier} does not carry data", e.path);
            }
            if views.contains(&"data.nii") {
                let nii = std::fs::read(dir.join("data.nii")).unwrap();
                assert_eq!(&nii[344..348], b"n+1\0");
                assert_eq!(nii.len(), 4096 + e.bytes.len());
            }
            if views.contains(&"data.hdr") {
                let hdr = std::fs::read_to_string(dir.join("data.hdr")).unwrap();
                assert!(hdr.starts_with(&format!("ENVI\nsamples = {}\n", e.shape[e.shape.len() - 1])), "{hdr}");
            }
        }
    }
}

#[test]
fn writes_through_npy_are_writes_to_the_array_and_the_header_stays() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let before = common::snapshot(&store);
    let m = Mount::new(&store, &[]);
    let npy_path = m.path("dtypes/int32/data.npy");
    let data_path = m.path("dtypes/int32/data");
    let old = std::fs::read(&data_path).unwrap();
    let npy = std::fs::OpenOptions::new().read(true).write(true).open(&npy_path).unwrap();
    let header = std::fs::read(&npy_path).unwrap()[..4096].to_vec();
    // Refused: a changed header byte, a write past the end, a resize. The store is untouched.
    assert_eq!(npy.write_at(b"X", 20).unwrap_err().raw_os_error(), Some(libc::EPERM));
    assert_eq!(npy.write_at(&[1; 4], 4096 + old.len() as u64).unwrap_err().raw_os_error(), Some(libc::EOPNOTSUPP));
    assert_eq!(npy.set_len(4096).unwrap_err().raw_os_error(), Some(libc::EOPNOTSUPP));
    npy.sync_all().unwrap();
    assert_eq!(common::snapshot(&store), before, "a refused write changed the store");
    // The header written back unchanged (as an mmap page would be) and an element changed.
    npy.write_all_at(&header[..64], 0).unwrap();
    npy.write_all_at(&7i32.to_le_bytes(), 4096 + 8).unwrap();
    drop(npy);
    let mut want = old.clone();
    want[8..12].copy_from_slice(&7i32.to_le_bytes());
    assert_eq!(std::fs::read(&data_path).unwrap(), want, "data shows the write through data.npy");
    drop(m);
    let m = Mount::new(&store, &[]);
    assert_eq!(std::fs::read(m.path("dtypes/int32/data")).unwrap(), want, "the write was stored");
}

#[test]
fn views_follow_a_growth_through_data() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &[]);
    let dir = m.path("dtypes/uint16");
    let rows_before = std::fs::metadata(dir.join("data")).unwrap().len() / (5 * 2);
    let f = std::fs::OpenOptions::new().write(true).open(dir.join("data")).unwrap();
    f.set_len((rows_before + 3) * 5 * 2).unwrap();
    drop(f);
    let rows = rows_before + 3;
    assert_eq!(std::fs::metadata(dir.join("data.npy")).unwrap().len(), 4096 + rows * 10);
    assert!(npy_dict(&std::fs::read(dir.join("data.npy")).unwrap()).contains(&format!("'shape': ({rows}, 5)")));
    assert!(std::fs::read_to_string(dir.join("data.raw.nhdr")).unwrap().contains(&format!("sizes: 5 {rows}\n")));
    assert!(std::fs::read_to_string(dir.join("data.hdr")).unwrap().contains(&format!("lines = {rows}\n")));
}

#[test]
fn the_views_option_chooses_which_appear_and_sidecars_are_read_only() {
    let fixture = fixtures().join("v3.zarr");
    let dir = |m: &Mount| m.path("dtypes/float32");
    let none = Mount::new(&fixture, &["-o", "views=none"]);
    assert!(!dir(&none).join("data.npy").exists() && !dir(&none).join("data.mhd").exists());
    drop(none);
    let some = Mount::new(&fixture, &["--views", "npy,mhd"]);
    let names: Vec<String> = std::fs::read_dir(dir(&some)).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.contains(&"data.npy".into()) && names.contains(&"data.mhd".into()), "{names:?}");
    assert!(!names.contains(&"data.raw.nhdr".into()) && !names.contains(&"data.hdr".into()), "{names:?}");
    let err = std::fs::OpenOptions::new().write(true).open(dir(&some).join("data.mhd")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
}

#[test]
fn a_change_through_one_file_is_seen_through_the_others_already_cached() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &[]);
    let dir = m.path("dtypes/int32");
    // Both files are read first, so the kernel holds their pages.
    let npy_before = std::fs::read(dir.join("data.npy")).unwrap();
    let data_before = std::fs::read(dir.join("data")).unwrap();
    assert!(npy_before[4096..] == data_before[..]);
    std::fs::OpenOptions::new().write(true).open(dir.join("data")).unwrap().write_all_at(&99i32.to_le_bytes(), 0).unwrap();
    assert_eq!(std::fs::read(dir.join("data.npy")).unwrap()[4096..4100], 99i32.to_le_bytes(), "data.npy shows a write through data");
    std::fs::OpenOptions::new().write(true).open(dir.join("data.npy")).unwrap().write_all_at(&77i32.to_le_bytes(), 4100).unwrap();
    assert_eq!(std::fs::read(dir.join("data")).unwrap()[4..8], 77i32.to_le_bytes(), "data shows a write through data.npy");
    let tif = std::fs::read(dir.join("data.tif")).unwrap();
    assert_eq!(tif[4096..4104], [99i32.to_le_bytes(), 77i32.to_le_bytes()].concat()[..], "data.tif shows both");
    // A growth through data: the views' sizes and headers follow although their pages were cached.
    let f = std::fs::OpenOptions::new().write(true).open(dir.join("data")).unwrap();
    f.set_len(data_before.len() as u64 + 5 * 4).unwrap();
    drop(f);
    let npy = std::fs::read(dir.join("data.npy")).unwrap();
    assert_eq!(npy.len(), 4096 + data_before.len() + 20);
    assert!(npy_dict(&npy).contains("'shape': (8, 5)"), "{}", npy_dict(&npy));
}
