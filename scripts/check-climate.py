#!/usr/bin/env python3
"""Climate and GIS datasets as their tools read them through a live mount (the xarray fixtures in
tests/fixtures/climate: Zarr v2 consolidated, v3 with a sharded variable, a GeoZarr raster):
`dataset.nc` opened by xarray (netCDF4) equals xarray's read of the Zarr group (values, dims,
coords, attributes but those netCDF cannot hold, CF-decoded times); `ncdump -h`/`-v` agree with
zarr-python; `cdo showname`/`sinfo` and `ncks -m` run clean; GDAL (rasterio) reads every
georeferenced array through `data.vrt` and ENVI as an N-band raster with the CRS, transform,
no-data value and band names its coordinates say, and `data.tif` with its GeoTIFF keys. Then,
on a copy, the view follows a write and a prepend. A kerchunk reference set of two netCDF4 files
mounts with a `dataset.nc` that ncdump, cdo and xarray read as the original files.

    scripts/check-climate.py target/release/zarrfs
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import rasterio
import xarray as xr
import zarr

warnings.filterwarnings("ignore")

import checks

binary = os.path.abspath(sys.argv[1])
fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "climate")
check = checks.Checks("climate")
mount = lambda store, mnt, *extra: checks.mount(binary, store, mnt, *extra)
unmount = lambda mnt: checks.unmount(binary, mnt)


def flat_attrs(attrs):
    """The attributes netCDF holds: none whose value is an object."""
    return {k: v for k, v in attrs.items() if not isinstance(v, dict)}


def same_dataset(nc_path, store, what):
    a = xr.open_dataset(nc_path).load()
    b = xr.open_zarr(store).load()
    b.attrs = flat_attrs(b.attrs)
    try:
        xr.testing.assert_identical(a, b)
        check(True, "")
    except AssertionError as e:
        check(False, f"{what}: xarray differs: {str(e)[:800]}")
    return a


def tool(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def ncdump_values(nc_path, var):
    """The values `ncdump -v` prints for `var` (NaN as nan, _ as the fill)."""
    _, out, _ = tool("ncdump", "-v", var, nc_path)
    body = out.split(f" {var} =", 1)[1].split(";", 1)[0]
    # `_` is the fill value (NaN for air).
    return [float("nan") if t.strip().lower().startswith("nan") or t.strip() == "_" else float(t)
            for t in body.replace("\n", " ").split(",") if t.strip()]


work = tempfile.mkdtemp(prefix="zarrfs-climate-")
try:
    for store in ("v2.zarr", "v3.zarr"):
        mnt = os.path.join(work, "mnt-" + store)
        path = os.path.join(fixtures, store)
        mount(path, mnt, "--read-only")
        try:
            nc = os.path.join(mnt, "dataset.nc")
            ds = same_dataset(nc, path, store)
            group = zarr.open_group(path, mode="r")
            code, out, err = tool("ncdump", "-h", nc)
            check(code == 0 and "float air(time, lat, lon)" in out and 'air:grid_mapping = "crs"' in out, f"{store}: ncdump -h: {err}{out[:400]}")
            for var in ("air", "t2m", "flags"):
                want = np.asarray(group[var][...], dtype="float64").ravel()
                got = np.array(ncdump_values(nc, var))
                check(got.shape == want.shape and np.allclose(got, want, equal_nan=True, rtol=1e-6), f"{store}: ncdump -v {var}")
            # A classic CDF-2 file (times held as ints, as xarray's netCDF3 writer holds them): xarray's
            # scipy engine and Debian 12's GDAL 3.6, which cannot read CDF-5, read it.
            with open(nc, "rb") as f:
                check(f.read(4) == b"CDF\x02", f"{store}: dataset.nc is not CDF-2")
            try:
                xr.testing.assert_identical(xr.open_dataset(nc, engine="scipy").load(), ds)
                check(True, "")
            except Exception as e:
                check(False, f"{store}: xarray's scipy engine: {str(e)[:400]}")
            code, out, err = tool("gdalinfo", "-stats", f'NETCDF:"{nc}":air')
            means = [float(m) for m in re.findall(r"STATISTICS_MEAN=([-0-9.e+]+)", out)]
            want = [float(np.nanmean(step)) for step in group["air"][...]]
            check(code == 0 and np.allclose(means, want, atol=1e-3), f"{store}: gdalinfo -stats air (a band a time): {code} {means} {want} {err[:300]}")
            for args in (("cdo", "-s", "showname", nc), ("cdo", "-s", "sinfo", nc), ("ncks", "-m", nc)):
                code, out, err = tool(*args)
                check(code == 0 and "Error" not in err, f"{store}: {' '.join(args[:3])}: {code} {err[:300]}")
            code, out, _ = tool("cdo", "-s", "showname", nc)
            check(out.split() == ["air", "flags", "t2m"], f"{store}: cdo showname says {out.split()}")
            # GDAL: the (time, lat, lon) raster, N bands, through its VRT and its ENVI header.
            lat, lon, times = ds["lat"].values, ds["lon"].values, ds["time"].values
            dx, dy = float(lon[1] - lon[0]), float(lat[1] - lat[0])
            want_transform = (float(lon[0]) - dx / 2, dx, 0.0, float(lat[0]) - dy / 2, 0.0, dy)
            names = [np.datetime_as_string(t, unit="s") for t in times]
            air = group["air"][...]
            for view in ("data.vrt", "data"):
                with rasterio.open(os.path.join(mnt, "air", view)) as r:
                    check(r.count == air.shape[0], f"{store}: GDAL {view}: {r.count} bands")
                    check(r.crs is not None and r.crs.to_epsg() == 4326, f"{store}: GDAL {view}: CRS {r.crs}")
                    check(np.allclose(r.transform.to_gdal(), want_transform), f"{store}: GDAL {view}: transform {r.transform.to_gdal()}")
                    check(r.nodata is not None and np.isnan(r.nodata), f"{store}: GDAL {view}: nodata {r.nodata}")
                    check(list(r.descriptions) == names, f"{store}: GDAL {view}: band names {r.descriptions}")
                    check(np.array_equal(r.read(), air, equal_nan=True), f"{store}: GDAL {view}: values")
            with rasterio.open(os.path.join(mnt, "air", "data.tif")) as r:
                check(r.crs is not None and r.crs.to_epsg() == 4326 and np.allclose(r.transform.to_gdal(), want_transform),
                      f"{store}: GeoTIFF keys of data.tif: {r.crs} {r.transform.to_gdal()}")
                check(np.array_equal(r.read(1), air[0], equal_nan=True), f"{store}: GDAL data.tif values")
            # CF packing in the GIS views: GDAL reads t2m's scale, offset and units, and its
            # physical values (count x scale + offset) are xarray's.
            t2m = ds["t2m"].values
            for view in ("data.vrt", "data", "data.tif"):
                with rasterio.open(os.path.join(mnt, "t2m", view)) as r:
                    check(r.scales[0] == 0.01 and r.offsets[0] == 0.0, f"{store}: GDAL {view}: scale {r.scales} offset {r.offsets}")
                    if view != "data":  # ENVI has no band units
                        check(r.units[0] == "degC", f"{store}: GDAL {view}: units {r.units}")
                    counts = r.read(1, masked=True).astype("float64")
                    physical = (counts * r.scales[0] + r.offsets[0]).filled(np.nan)
                    check(np.allclose(physical, t2m[0], equal_nan=True, atol=1e-6), f"{store}: GDAL {view}: physical values")
            # Packed data keeps its scale: netCDF4 unpacks as xarray does.
            check(abs(float(ds["t2m"].values[1, 1, 1]) - float(group["t2m"][1, 1, 1]) * 0.01) < 1e-6, f"{store}: t2m unpacked")
        finally:
            unmount(mnt)

    # A GeoZarr raster: EPSG:32633, its transform from spatial:transform.
    mnt = os.path.join(work, "mnt-utm")
    mount(os.path.join(fixtures, "utm.zarr"), mnt, "--read-only")
    try:
        want = zarr.open_array(os.path.join(fixtures, "utm.zarr", "band"), mode="r")[...]
        for view in ("data.vrt", "data.tif", "data"):
            with rasterio.open(os.path.join(mnt, "band", view)) as r:
                check(r.crs is not None and r.crs.to_epsg() == 32633, f"utm {view}: CRS {r.crs}")
                check(r.transform.to_gdal() == (500000.0, 10.0, 0.0, 6000200.0, 0.0, -10.0), f"utm {view}: {r.transform.to_gdal()}")
                check(r.nodata == 0 and np.array_equal(r.read(1), want), f"utm {view}: nodata {r.nodata}, values")
    finally:
        unmount(mnt)

    # A raster GDAL wrote (its `_CRS`, X and Y coordinates): the CRS and transform GDAL gave it.
    mnt = os.path.join(work, "mnt-gdal-utm")
    store = os.path.join(fixtures, "..", "foreign", "gdal_utm.zarr")
    mount(store, mnt, "--read-only")
    try:
        want = zarr.open_array(os.path.join(store, "gdal_utm"), mode="r")[...]
        for view in ("data.vrt", "data.tif", "data"):
            with rasterio.open(os.path.join(mnt, "gdal_utm", view)) as r:
                check(r.crs is not None and r.crs.to_epsg() == 32633, f"gdal utm {view}: CRS {r.crs}")
                check(r.transform.to_gdal() == (500000.0, 10.0, 0.0, 6000200.0, 0.0, -10.0), f"gdal utm {view}: {r.transform.to_gdal()}")
                check(np.array_equal(r.read(1), want), f"gdal utm {view}: values")
    finally:
        unmount(mnt)

    # ERA5's names, and others netCDF classic takes as they are: kept, so cdo -selname finds them.
    store = os.path.join(work, "names.zarr")
    names = ["2m_temperature", "10m_u_component_of_wind", "niveau_d'eau"]
    xr.Dataset({n: (("time", "lat"), np.arange(6, dtype="float32").reshape(2, 3) + i) for i, n in enumerate(names)},
               coords={"time": [0, 1], "lat": [10.0, 20.0, 30.0]}).to_zarr(store, zarr_format=3, consolidated=False)
    mnt = os.path.join(work, "mnt-names")
    mount(store, mnt, "--read-only")
    try:
        nc = os.path.join(mnt, "dataset.nc")
        code, out, err = tool("cdo", "-s", "showname", nc)
        check(code == 0 and sorted(out.split()) == sorted(names), f"names: cdo showname says {out.split()} {err[:200]}")
        selected = os.path.join(work, "selected.nc")
        code, _, err = tool("cdo", "-s", "-selname,2m_temperature", nc, selected)
        check(code == 0 and os.path.exists(selected), f"names: cdo -selname,2m_temperature: {code} {err[:300]}")
        with xr.open_dataset(nc) as d:
            check(sorted(d.data_vars) == sorted(names), f"names: xarray reads {sorted(d.data_vars)}")
            check(float(d["niveau_d'eau"].values[1, 2]) == 7.0, "names: the values under a kept name")
    finally:
        unmount(mnt)

    # On a copy: dataset.nc follows a write through data and a prepend; a prepend to one of
    # its time series alone leaves a dimension of two lengths, and no dataset.nc.
    store = os.path.join(work, "rw.zarr")
    shutil.copytree(os.path.join(fixtures, "v3.zarr"), store)
    series = zarr.open_group(store, mode="a").create_group("series")
    level = series.create_array("level", shape=(4,), chunks=(2,), dtype="int16", fill_value=-1, dimension_names=["step"])
    level[...] = [10, 11, 12, 13]
    mnt = os.path.join(work, "mnt-rw")
    mount(store, mnt, "--adopt-offset")
    try:
        with open(os.path.join(mnt, "air", "data"), "r+b") as f:
            f.write(np.float32(123.5).tobytes())
        with xr.open_dataset(os.path.join(mnt, "dataset.nc")) as d:
            check(float(d["air"].values[0, 0, 0]) == 123.5, "dataset.nc after a write through data")
        with open(os.path.join(mnt, "series", "level", "prepend"), "wb") as f:
            f.write(np.array([8, 9], dtype="<i2").tobytes())
        with xr.open_dataset(os.path.join(mnt, "series", "dataset.nc")) as d:
            check(d["level"].values.tolist() == [8, 9, 10, 11, 12, 13], f"dataset.nc after a prepend: {d['level'].values}")
        with open(os.path.join(mnt, "air", "prepend"), "wb") as f:
            f.write(np.full((2, 9, 14), 200.0, dtype="<f4").tobytes())
        check(not os.path.exists(os.path.join(mnt, "dataset.nc")), "a dimension of two lengths: no dataset.nc")
    finally:
        unmount(mnt)
    out = subprocess.run([binary, "info", store], capture_output=True, text=True).stdout
    check("no dataset.nc: dimension time is" in out, f"info says why there is no dataset.nc: {out[:300]}")

    # A kerchunk reference set of two netCDF4 files (MultiZarrToZarr along time): its
    # dataset.nc is what ncdump and xarray read of the two original files, side by side.
    refs = os.path.join(fixtures, "..", "kerchunk")
    mnt = os.path.join(work, "mnt-series")
    mount(os.path.join(refs, "series.json"), mnt)
    try:
        nc = os.path.join(mnt, "dataset.nc")
        code, out, err = tool("ncdump", "-h", nc)
        check(code == 0 and "float air(time, lat, lon)" in out and 'air:units = "K"' in out, f"series: ncdump -h: {err}{out[:400]}")
        originals = xr.concat([xr.open_dataset(os.path.join(refs, f"day{i}.nc"), decode_times=False) for i in range(2)], dim="time")
        check(ncdump_values(nc, "time") == originals["time"].values.tolist(), "series: ncdump -v time")
        with xr.open_dataset(nc, decode_times=False) as d:
            check(np.array_equal(d["air"].values, originals["air"].values), "series: air through dataset.nc equals the netCDF4 files'")
            check(d["air"].attrs.get("units") == "K" and d["time"].attrs.get("units") == "days since 2020-01-01",
                  f"series: the files' attributes: {d['air'].attrs} {d['time'].attrs}")
        code, out, err = tool("cdo", "-s", "showname", nc)
        check(code == 0 and "air" in out.split(), f"series: cdo showname: {out} {err[:200]}")
        with open(os.path.join(mnt, "air", "data"), "rb") as f:
            air = f.read()
    finally:
        unmount(mnt)

    # The same set compressed as fsspec writes one whose name asks for it (compression="infer"),
    # beside its netCDF4 files: mounted as it is, read as fsspec reads it.
    import fsspec
    copied = os.path.join(work, "kerchunk")
    shutil.copytree(refs, copied)
    with open(os.path.join(refs, "series.json"), "rb") as f:
        plain = f.read()
    for suffix in ("gz", "bz2", "xz"):
        packed = os.path.join(copied, f"series.json.{suffix}")
        with fsspec.open(packed, "wb", compression="infer") as f:
            f.write(plain)
        with open(packed, "rb") as f:
            check(f.read(6) != plain[:6], f"series.json.{suffix}: fsspec wrote it uncompressed")
        theirs = fsspec.filesystem("reference", fo=packed, target_options={"compression": "infer"})
        check(theirs.cat("time/0") == fsspec.filesystem("reference", fo=os.path.join(refs, "series.json")).cat("time/0"),
              f"series.json.{suffix}: fsspec reads it")
        mnt = os.path.join(work, f"mnt-series-{suffix}")
        mount(packed, mnt)
        try:
            with open(os.path.join(mnt, "air", "data"), "rb") as f:
                check(f.read() == air, f"series.json.{suffix}: air as of the uncompressed set")
        finally:
            unmount(mnt)
finally:
    checks.detach_beneath(work)
    shutil.rmtree(work, ignore_errors=True)

sys.exit(check.finish())
