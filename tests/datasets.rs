//! xarray-style datasets through a mount: `dataset.nc` in a group of arrays with named axes
//! (a netCDF classic file whose variables are the arrays, big-endian), and the georeferencing of
//! rasters in `data.tif` (GeoTIFF), `data.hdr` (ENVI) and `data.vrt` (GDAL).

mod common;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Mount, fixtures, netcdf, tiff};

fn climate(store: &str) -> PathBuf {
    fixtures().join("climate").join(store)
}

/// `bytes` with each element of `size` bytes reversed (little- to big-endian).
fn swapped(bytes: &[u8], size: usize) -> Vec<u8> {
    bytes.chunks(size).flat_map(|c| c.iter().rev().copied()).collect()
}

#[test]
fn a_dataset_group_shows_a_netcdf_file_whose_variables_are_its_arrays_big_endian() {
    for store in ["v2.zarr", "v3.zarr"] {
        let m = Mount::new(&climate(store), &["--read-only"]);
        let path = m.path("dataset.nc");
        let file = std::fs::read(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), file.len() as u64);
        let nc = netcdf::read(&file);
        // int64 times whose values fit an int are held as one (as xarray's netCDF3 writer does):
        // CDF-2, which GDAL 3.6 and scipy read.
        assert_eq!(nc.version, 2, "{store}");
        assert_eq!(nc.dims, vec![("time".to_string(), 4), ("lat".to_string(), 9), ("lon".to_string(), 14)], "{store}");
        let names: Vec<&str> = nc.vars.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["lat", "lon", "time", "air", "crs", "flags", "t2m"], "{store}: coordinates first");
        for v in &nc.vars {
            let size = netcdf::type_size(v.kind);
            let len = v.dims.iter().map(|&d| nc.dims[d].1 as usize).product::<usize>() * size;
            let mut data = std::fs::read(m.path(&v.name).join("data")).unwrap();
            if v.name == "time" {
                assert_eq!(v.kind, 4, "{store}: time as an int");
                data = data.chunks(8).flat_map(|c| (i64::from_le_bytes(c.try_into().unwrap()) as i32).to_le_bytes()).collect();
            }
            assert!(file[v.begin as usize..v.begin as usize + len] == swapped(&data, size)[..], "{store}: {}", v.name);
            assert_eq!(v.begin % 4, 0, "aligned");
        }
        let air = nc.vars.iter().find(|v| v.name == "air").unwrap();
        let attr = |name: &str| air.attributes.iter().find(|a| a.0 == name).map(|a| (a.1, a.2.clone()));
        assert_eq!(attr("units"), Some((2, b"degK".to_vec())));
        let (kind, fill) = attr("_FillValue").unwrap();
        assert!(kind == 5 && f32::from_be_bytes(fill[..4].try_into().unwrap()).is_nan(), "{store}: a float NaN fill");
        assert!(
            nc.globals.iter().any(|g| g.0 == "title") && !nc.globals.iter().any(|g| g.0 == "history"),
            "nested attributes are left out"
        );
        // pread of a slab in the middle.
        let f = std::fs::File::open(&path).unwrap();
        let mut part = vec![0u8; 100];
        f.read_exact_at(&mut part, air.begin + 40).unwrap();
        assert_eq!(part, file[air.begin as usize + 40..air.begin as usize + 140]);
        let err = std::fs::OpenOptions::new().write(true).open(&path).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    }
}

#[test]
fn georeferenced_arrays_carry_their_transform_in_tiff_envi_and_vrt() {
    let m = Mount::new(&climate("v2.zarr"), &["--read-only"]);
    // Latitudes 75 to 15 by -7.5, longitudes 200 to 330 by 10: pixel corners at (195, 78.75).
    let vrt = std::fs::read_to_string(m.path("air/data.vrt")).unwrap();
    assert!(vrt.contains("<GeoTransform>195, 10, 0, 78.75, 0, -7.5</GeoTransform>"), "{vrt}");
    assert!(vrt.contains("<Description>2013-01-01T06:00:00</Description>") && vrt.matches("<VRTRasterBand").count() == 4, "{vrt}");
    let hdr = std::fs::read_to_string(m.path("air/data.hdr")).unwrap();
    assert!(hdr.contains("map info = {Geographic Lat/Lon, 1, 1, 195, 78.75, 10, 7.5, WGS-84, units=Degrees}\n"), "{hdr}");
    assert!(hdr.contains("data ignore value = nan\n") && hdr.contains("band names = {2013-01-01T00:00:00, "), "{hdr}");
    let tif = std::fs::read(m.path("air/data.tif")).unwrap();
    let page = &tiff::pages(&tif)[0];
    let doubles = |tag: u16| page.tags[&tag].iter().map(|&b| f64::from_bits(b)).collect::<Vec<_>>();
    assert_eq!(doubles(33550), vec![10.0, 7.5, 0.0]);
    assert_eq!(doubles(33922), vec![0.0, 0.0, 0.0, 195.0, 78.75, 0.0]);
    assert_eq!(page.tags[&34735], vec![1, 1, 0, 3, 1024, 0, 1, 2, 1025, 0, 1, 1, 2048, 0, 1, 4326]);
    assert_eq!(page.tags[&42113].iter().map(|&b| b as u8).collect::<Vec<_>>(), b"nan\0");
    // Coordinates are no rasters.
    assert!(!m.path("lat/data.vrt").exists());
    drop(m);
    let m = Mount::new(&climate("utm.zarr"), &["--read-only"]);
    let tif = std::fs::read(m.path("band/data.tif")).unwrap();
    let page = &tiff::pages(&tif)[0];
    assert_eq!(page.tags[&34735][12..], [3072, 0, 1, 32633], "a projected CRS");
    assert!(std::fs::read_to_string(m.path("band/data.vrt")).unwrap().contains(">EPSG:32633</SRS>"));
}

#[test]
fn dataset_nc_follows_its_arrays_and_a_clash_of_dimension_lengths_shows_none() {
    let (_dir, store) = common::copy_store(&climate("v3.zarr"));
    let m = Mount::new(&store, &[]);
    let nc_path = m.path("dataset.nc");
    let before = std::fs::read(&nc_path).unwrap();
    let air_begin = netcdf::read(&before).vars.iter().find(|v| v.name == "air").unwrap().begin as usize;
    std::fs::OpenOptions::new().write(true).open(m.path("air/data")).unwrap().write_all_at(&1.5f32.to_le_bytes(), 0).unwrap();
    common::eventually(&nc_path, |now| now[air_begin..air_begin + 4] == 1.5f32.to_be_bytes(), "dataset.nc shows a write through data");
    // Two more time steps of t2m alone: `time` would have two lengths. The mount's own change
    // makes the view go (and come back) at once, not after the metadata TTL (5 s).
    let t2m = m.path("t2m/data");
    let steps = std::fs::metadata(&t2m).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&t2m).unwrap();
    f.set_len(6 * 9 * 14 * 2).unwrap();
    drop(f);
    let deadline = Instant::now() + Duration::from_secs(1);
    while nc_path.exists() {
        assert!(Instant::now() < deadline, "a group whose dimension lengths clash has no dataset.nc");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::OpenOptions::new().write(true).open(&t2m).unwrap().set_len(steps).unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    while !nc_path.exists() {
        assert!(Instant::now() < deadline, "dataset.nc is back once the lengths agree again");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read(&nc_path).unwrap().len() as u64, std::fs::metadata(&nc_path).unwrap().len());
}

#[test]
fn int64_values_are_held_as_the_narrowest_classic_type_that_holds_them_all() {
    let (_dir, store) = common::copy_store(&climate("v2.zarr"));
    let m = Mount::new(&store, &[]);
    let nc_path = m.path("dataset.nc");
    // (version, time's type, time's bytes) once they satisfy `want`; a read that meets a value
    // the open layout cannot hold fails with ESTALE, and the next open lays the file out again.
    let read_until = |want: &dyn Fn(u8, u32) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match std::fs::read(&nc_path) {
                Ok(file) => {
                    let nc = netcdf::read(&file);
                    let time = nc.vars.iter().find(|v| v.name == "time").unwrap();
                    if want(nc.version, time.kind) {
                        return (nc.version, time.kind, file[time.begin as usize..][..4 * netcdf::type_size(time.kind)].to_vec());
                    }
                }
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}"),
            }
            assert!(Instant::now() < deadline, "dataset.nc never laid out again");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (_, _, values) = read_until(&|version, kind| (version, kind) == (2, 4));
    let hours: Vec<i64> = values.chunks(4).map(|c| i64::from(i32::from_be_bytes(c.try_into().unwrap()))).collect();
    // A value past an int's range, written through the mount: doubles hold it, still CDF-2.
    let time = std::fs::OpenOptions::new().write(true).open(m.path("time/data")).unwrap();
    let far = 1i64 << 40;
    time.write_all_at(&far.to_le_bytes(), 8).unwrap();
    time.sync_all().unwrap();
    let (_, _, values) = read_until(&|version, kind| (version, kind) == (2, 6));
    let doubles: Vec<f64> = values.chunks(8).map(|c| f64::from_be_bytes(c.try_into().unwrap())).collect();
    assert_eq!(doubles, [hours[0] as f64, far as f64, hours[2] as f64, hours[3] as f64]);
    // Past 2^53 only int64 holds it exactly: CDF-5.
    time.write_all_at(&((1i64 << 53) + 1).to_le_bytes(), 8).unwrap();
    time.sync_all().unwrap();
    read_until(&|version, kind| (version, kind) == (5, 10));
    let info = Command::new(env!("CARGO_BIN_EXE_zarrfs")).arg("info").arg(&store).output().unwrap();
    let said = String::from_utf8_lossy(&info.stdout);
    assert!(said.contains("held in dataset.nc: time: int64 (its values pass 2^53"), "{said}");
}
