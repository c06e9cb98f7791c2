//! OME-Zarr images through a mount: `image.ome.tif` in every image group (its planes are level
//! 0's, its SubIFDs the lower levels'), and the axes of each level in the views of its `data`.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Mount, bin, fixtures, tiff};

fn ome(store: &str) -> PathBuf {
    fixtures().join("ome").join(store)
}

/// An array's shape and item size, from its metadata document as the mount shows it.
fn shape_of(dir: &Path) -> (Vec<u64>, u64) {
    let (doc, v3) = match std::fs::read(dir.join("zarr.json")) {
        Ok(b) => (b, true),
        Err(_) => (std::fs::read(dir.join(".zarray")).unwrap(), false),
    };
    let doc: serde_json::Value = serde_json::from_slice(&doc).unwrap();
    let shape = doc["shape"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
    let dtype = if v3 { doc["data_type"].as_str().unwrap().to_string() } else { doc["dtype"].as_str().unwrap()[1..].to_string() };
    let item = match dtype.as_str() {
        "uint8" | "u1" => 1,
        "uint16" | "u2" => 2,
        "uint32" | "u4" | "float32" | "f4" => 4,
        other => panic!("{other}"),
    };
    (shape, item)
}

/// Every plane of every level the OME-TIFF holds is that level's `data`, in order.
fn check_image(group: &Path, planes: u64, levels: &[&str]) {
    let file = std::fs::read(group.join("image.ome.tif")).unwrap_or_else(|e| panic!("{}: {e}", group.display()));
    let pages = tiff::pages(&file);
    assert_eq!(pages.len() as u64, planes, "{}", group.display());
    let data: Vec<(Vec<u8>, u64)> = levels
        .iter()
        .map(|l| {
            let (shape, item) = shape_of(&group.join(l));
            (std::fs::read(group.join(l).join("data")).unwrap(), shape[shape.len() - 1] * shape[shape.len() - 2] * item)
        })
        .collect();
    for (k, page) in pages.iter().enumerate() {
        let k = k as u64;
        let (bytes, plane) = &data[0];
        assert!(page.plane(&file) == bytes[(k * plane) as usize..((k + 1) * plane) as usize], "{}: plane {k}", group.display());
        assert_eq!(page.get(254), 0);
        assert_eq!(page.subifds.len(), levels.len() - 1, "{}: SubIFDs", group.display());
        for (sub, (bytes, plane)) in page.subifds.iter().zip(&data[1..]) {
            assert_eq!(sub.get(254), 1, "a reduced-resolution image");
            assert!(
                sub.plane(&file) == bytes[(k * plane) as usize..((k + 1) * plane) as usize],
                "{}: plane {k} of a level",
                group.display()
            );
        }
    }
    // pread and mmap see the same bytes as read.
    let f = std::fs::File::open(group.join("image.ome.tif")).unwrap();
    let mut part = vec![0u8; 5000];
    let n = f.read_at(&mut part, 4000).unwrap();
    assert_eq!(part[..n], file[4000..4000 + n]);
    // SAFETY: nothing changes the file while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    assert!(map[..] == file[..], "{}: mmap", group.display());
}

#[test]
fn every_image_group_shows_an_ome_tiff_whose_planes_and_subifds_are_its_levels() {
    let v04 = Mount::new(&ome("v04.zarr"), &["--read-only"]);
    check_image(&v04.path("cells"), 2 * 5, &["0", "1", "2"]);
    check_image(&v04.path("cells/labels/nuclei"), 5, &["0", "1"]);
    // Its third level also halves time: left out.
    check_image(&v04.path("movie"), 4, &["0", "1"]);
    check_image(&v04.path("plate/A/1/0"), 3, &["0", "1"]);
    let v05 = Mount::new(&ome("v05.zarr"), &["--read-only"]);
    check_image(&v05.path("embryo"), 2 * 3 * 4, &["0", "1"]);
    check_image(&v05.path("slide"), 1, &["0", "1", "2", "3"]);
    check_image(&v05.path("float_zyx"), 3, &["0"]);
    // The OME-XML: sizes, physical sizes, channels, every directory in order.
    let file = std::fs::read(v05.path("embryo/image.ome.tif")).unwrap();
    let xml = tiff::pages(&file)[0].description().unwrap();
    for want in [
        "DimensionOrder=\"XYZCT\" Type=\"uint16\" SizeX=\"50\" SizeY=\"40\" SizeZ=\"4\" SizeC=\"3\" SizeT=\"2\"",
        "PhysicalSizeX=\"0.25\" PhysicalSizeXUnit=\"µm\"",
        "PhysicalSizeZ=\"1.5\" PhysicalSizeZUnit=\"µm\"",
        "TimeIncrement=\"2\" TimeIncrementUnit=\"min\"",
        "<Channel ID=\"Channel:0:0\" SamplesPerPixel=\"1\" Name=\"red\" Color=\"-16776961\"/>",
        "<TiffData IFD=\"0\" PlaneCount=\"24\"/>",
    ] {
        assert!(xml.contains(want), "{want} not in {xml}");
    }
    // Only directory 0 carries the description.
    assert!(tiff::pages(&file)[1].description().is_none());
    // Listing a plate's well shows the field image group; the field group shows its OME-TIFF.
    let names: Vec<String> =
        std::fs::read_dir(v04.path("plate/A/1/0")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.contains(&"image.ome.tif".to_string()), "{names:?}");
    // Groups that are no images have none.
    assert!(!v04.path("image.ome.tif").exists() && !v04.path("plate/image.ome.tif").exists());
}

#[test]
fn images_ome_tiff_cannot_hold_show_none_and_info_says_why() {
    let m = Mount::new(&ome("v05.zarr"), &["--read-only"]);
    assert!(m.path("slide/image.ome.tif").exists());
    for group in ["custom_axis", "odd_factor"] {
        assert!(!m.path(group).join("image.ome.tif").exists(), "{group}");
        assert!(m.path(group).join("0/data").exists(), "{group}: its arrays are served");
    }
    let info = |store: &str| {
        let out = Command::new(bin()).args(["info", ome(store).to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let v05 = info("v05.zarr");
    assert!(v05.contains("custom type \"wavelength\""), "{v05}");
    assert!(v05.contains("downsampled by 2 in x and 3 in y"), "{v05}");
    assert!(v05.contains("image.ome.tif (levels 0, 1, 2, 3)"), "{v05}");
    let v04 = info("v04.zarr");
    assert!(v04.contains("level 2: it also changes axis t (2 against 4)"), "{v04}");
    // Every NIfTI view of a level with time and channels says why it has none.
    assert!(v05.contains("no data.nii: NIfTI wants time on its 4th axis"), "{v05}");
}

#[test]
fn the_ome_tiff_follows_writes_and_growth_of_its_levels_and_is_read_only() {
    let (_dir, store) = common::copy_store(&ome("v05.zarr"));
    let m = Mount::new(&store, &[]);
    let image = m.path("slide/image.ome.tif");
    let before = std::fs::read(&image).unwrap();
    // Level 0's data starts at 4096.
    std::fs::OpenOptions::new().write(true).open(m.path("slide/0/data")).unwrap().write_all_at(b"zarrfs", 0).unwrap();
    common::eventually(&image, |b| &b[4096..4102] == b"zarrfs", "the OME-TIFF shows a write through a level's data");
    // 32 more rows of level 0: its planes are taller.
    let f = std::fs::OpenOptions::new().write(true).open(m.path("slide/0/data")).unwrap();
    f.set_len((128 + 32) * 96).unwrap();
    drop(f);
    common::eventually(&image, |b| tiff::pages(b)[0].get(257) == 160, "the OME-TIFF follows a growth");
    assert!(std::fs::metadata(&image).unwrap().len() > before.len() as u64);
    let err = std::fs::OpenOptions::new().write(true).open(&image).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    drop(m);
    let ro = Mount::new(&store, &["--read-only"]);
    let err = std::fs::OpenOptions::new().write(true).open(ro.path("slide/image.ome.tif")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
}

#[test]
fn each_levels_views_carry_the_images_axes_units_and_sizes() {
    let m = Mount::new(&ome("v04.zarr"), &["--read-only"]);
    // (c, z, y, x) = (2, 5, 64, 48), 0.5 µm pixels, 2 µm slices.
    let level = m.path("cells/0");
    let nii = std::fs::read(level.join("data.nii")).unwrap();
    let dims: Vec<i16> = (0..8).map(|i| i16::from_le_bytes([nii[40 + 2 * i], nii[41 + 2 * i]])).collect();
    assert_eq!(dims, vec![5, 48, 64, 5, 1, 2, 1, 1], "x, y, z on dims 1-3, channels on 5");
    let pixdim = |i: usize| f32::from_le_bytes(nii[76 + 4 * i..80 + 4 * i].try_into().unwrap());
    assert_eq!((pixdim(1), pixdim(2), pixdim(3), nii[123]), (0.5, 0.5, 2.0, 3));
    let nhdr = std::fs::read_to_string(level.join("data.raw.nhdr")).unwrap();
    assert!(nhdr.contains("kinds: domain domain domain list\nspacings: 0.5 0.5 2 nan\n"), "{nhdr}");
    let mhd = std::fs::read_to_string(level.join("data.mhd")).unwrap();
    assert!(mhd.contains("ElementSpacing = 0.0005 0.0005 0.002 1\n"), "{mhd}");
    // A hyperstack in ImageJ's order (channels fastest): page 1 is channel 1 of slice 0, which
    // the array holds as plane 5.
    let tif = std::fs::read(level.join("data.tif")).unwrap();
    let pages = tiff::pages(&tif);
    assert_eq!(pages.len(), 10);
    let text = pages[0].description().unwrap();
    assert!(text.contains("channels=2\nslices=5\nhyperstack=true\nunit=micron\nspacing=2\n") && !text.contains("images="), "{text}");
    let plane = 64 * 48 * 2;
    assert_eq!((pages[1].get(273) - 4096) / plane, 5);
    // Pixels per micron, as ImageJ writes them (ResolutionUnit none).
    assert_eq!((pages[0].tags[&282][0] >> 32) as f64 / (pages[0].tags[&282][0] & 0xFFFF_FFFF) as f64, 2.0);
    // Level 1 has twice the pixel size.
    let nii = std::fs::read(m.path("cells/1/data.nii")).unwrap();
    assert_eq!(f32::from_le_bytes(nii[80..84].try_into().unwrap()), 1.0);
    // A v3 array's own dimension names are enough for the kinds.
    let v05 = Mount::new(&ome("v05.zarr"), &["--read-only"]);
    assert!(!v05.path("embryo/0/data.nii").exists(), "time inside channels: no NIfTI");
    let tif = std::fs::read(v05.path("embryo/0/data.tif")).unwrap();
    let text = tiff::pages(&tif)[0].description().unwrap();
    assert!(text.contains("channels=3\nslices=4\nframes=2\nhyperstack=true\n") && text.contains("finterval=120\n"), "{text}");
}
