#!/usr/bin/env python3
"""Header views read by the tools they are for: every array of the v3 and v2 fixtures with a
view is read through a live mount by numpy (`np.load` of `data.npy`, with `mmap_mode="r"`),
tifffile (`imread` and `memmap` of `data.tif`), Pillow (2-D `data.tif`), nibabel (`data.nii`),
pynrrd (`data.raw.nhdr`), SimpleITK (`data.mhd`) and GDAL through rasterio (`data` with its ENVI
`data.hdr`, and 2-D `data.tif`) — whichever of them is installed — and compared with
zarr-python's array. Then, on a copy: a write through `np.load(mmap_mode="r+")` is read back
through `data` and, after unmounting, by zarr-python; an array grown through `data` and one
prepended through `prepend` are re-read through their views by the same readers.

    scripts/check-views.py target/release/zarrfs
"""
import os
import shutil
import subprocess
import sys
import tempfile

import warnings

import numpy as np
import zarr

import checks

# zarr-python notes stray files in the fixtures, GDAL that a raw file has no geotransform.
warnings.filterwarnings("ignore")

binary = os.path.abspath(sys.argv[1])
fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
readers = {}
for name in ("nrrd", "SimpleITK", "rasterio", "tifffile", "PIL.Image", "nibabel"):
    try:
        readers[name] = __import__(name, fromlist=["_"])
    except ImportError:
        print(f"views: {name} is not installed; its view is not checked")
check = checks.Checks("views")
mount = lambda store, mnt, *extra: checks.mount(binary, store, mnt, *extra)
unmount = lambda mnt: checks.unmount(binary, mnt)


def reread(d, want, when):
    """The views of the array in `d`, read again after it changed, must show `want`."""
    check(np.array_equal(np.load(os.path.join(d, "data.npy")), want), f"numpy {when}")
    if "tifffile" in readers:
        check(np.array_equal(readers["tifffile"].imread(os.path.join(d, "data.tif")), want), f"tifffile {when}")
    if "nibabel" in readers:
        check(np.array_equal(np.asarray(readers["nibabel"].load(os.path.join(d, "data.nii")).dataobj), want.T), f"nibabel {when}")
    if "nrrd" in readers:
        check(np.array_equal(readers["nrrd"].read(os.path.join(d, "data.raw.nhdr"), index_order="C")[0], want), f"pynrrd {when}")
    if "SimpleITK" in readers:
        sitk = readers["SimpleITK"]
        check(np.array_equal(sitk.GetArrayFromImage(sitk.ReadImage(os.path.join(d, "data.mhd"))), want), f"SimpleITK {when}")


def as_le(a):
    return a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a


work = tempfile.mkdtemp(prefix="zarrfs-views-")
try:
    for store in ("v3.zarr", "v2.zarr"):
        mnt = os.path.join(work, "mnt-" + store)
        # The committed fixtures themselves: read-only, whatever happens to this script.
        mount(os.path.join(fixtures, store), mnt, "--read-only")
        try:
            for path, arr in checks.arrays(zarr.open_group(os.path.join(fixtures, store), mode="r")):
                d = os.path.join(mnt, path)
                if not os.path.exists(os.path.join(d, "data.npy")):
                    continue
                try:
                    want = as_le(arr[...])
                except Exception:
                    continue  # damaged fixtures are checked elsewhere
                what = f"{store}/{path}"
                got = np.load(os.path.join(d, "data.npy"), mmap_mode="r")
                # Byte for byte: NaN and NaT compare equal where their bits do.
                check(got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes(), f"{what}: np.load(data.npy)")
                if "nrrd" in readers and os.path.exists(os.path.join(d, "data.raw.nhdr")):
                    data, _ = readers["nrrd"].read(os.path.join(d, "data.raw.nhdr"), index_order="C")
                    check(np.array_equal(data, want.astype(data.dtype) if want.dtype == bool else want, equal_nan=True), f"{what}: pynrrd")
                # SimpleITK reads 2 to 5 dimensions: a 1-D array's header says N x 1.
                if "SimpleITK" in readers and os.path.exists(os.path.join(d, "data.mhd")) and want.ndim <= 5:
                    img = readers["SimpleITK"].GetArrayFromImage(readers["SimpleITK"].ReadImage(os.path.join(d, "data.mhd")))
                    img = img.reshape(want.shape)
                    check(np.array_equal(img, want.astype(img.dtype) if want.dtype == bool else want, equal_nan=True), f"{what}: SimpleITK")
                tif = os.path.join(d, "data.tif")
                as_stored = want.astype(np.uint8) if want.dtype == bool else want
                if "tifffile" in readers and os.path.exists(tif):
                    t = readers["tifffile"]
                    check(np.array_equal(t.imread(tif), as_stored, equal_nan=True), f"{what}: tifffile.imread")
                    check(np.array_equal(t.memmap(tif, mode="r"), as_stored, equal_nan=True), f"{what}: tifffile.memmap")
                    # Stacks ImageJ can hold are ImageJ stacks: one directory parsed, not one per plane.
                    imagej = as_stored.ndim == 3 and as_stored.shape[0] > 1 and as_stored.dtype.name in ("uint8", "uint16", "float32")
                    with t.TiffFile(tif) as f:
                        check((f.series[0].kind == "imagej") == imagej, f"{what}: tifffile series kind {f.series[0].kind}")
                if "PIL.Image" in readers and os.path.exists(tif) and want.ndim == 2 and as_stored.dtype in (np.uint8, np.float32):
                    with readers["PIL.Image"].open(tif) as im:
                        check(np.array_equal(np.asarray(im), as_stored, equal_nan=True), f"{what}: Pillow")
                if "rasterio" in readers and os.path.exists(tif) and want.ndim == 2 and as_stored.dtype != np.float16:
                    with readers["rasterio"].open(tif) as ds:
                        check(np.array_equal(ds.read(1), as_stored, equal_nan=True), f"{what}: GDAL GTiff")
                if "nibabel" in readers and os.path.exists(os.path.join(d, "data.nii")):
                    img = np.asarray(readers["nibabel"].load(os.path.join(d, "data.nii")).dataobj)
                    # NIfTI axes run fastest first: the transpose of the C-order array.
                    check(np.array_equal(img, as_stored.T, equal_nan=True), f"{what}: nibabel")
                if "rasterio" in readers and os.path.exists(os.path.join(d, "data.hdr")) and want.ndim in (2, 3):
                    with readers["rasterio"].open(os.path.join(d, "data")) as ds:
                        img = ds.read()
                    expect = want.reshape((1,) + want.shape) if want.ndim == 2 else want
                    check(np.array_equal(img, expect.astype(img.dtype) if want.dtype == bool else expect, equal_nan=True), f"{what}: GDAL ENVI")
        finally:
            unmount(mnt)

    # Stacks of the types ImageJ holds are ImageJ stacks: tifffile reads them as one block, and
    # they grow like any view.
    if "tifffile" in readers:
        t = readers["tifffile"]
        store = os.path.join(work, "stacks.zarr")
        g = zarr.open_group(store, mode="w")
        stacks = {dt: (np.arange(5 * 6 * 7) % 251).astype(dt).reshape(5, 6, 7) for dt in ("uint8", "uint16", "float32", "int32")}
        for dt, a in stacks.items():
            g.create_array(dt, data=a, chunks=(2, 3, 7))
        mnt = os.path.join(work, "mnt-stacks")
        mount(store, mnt)
        try:
            for dt, a in stacks.items():
                tif = os.path.join(mnt, dt, "data.tif")
                with t.TiffFile(tif) as f:
                    kind = f.series[0].kind
                    check(kind == ("imagej" if dt != "int32" else "generic"), f"{dt} stack: tifffile series kind {kind}")
                    check(f.is_imagej == (dt != "int32"), f"{dt} stack: ImageJ description")
                check(np.array_equal(t.imread(tif), a), f"{dt} stack: tifffile.imread")
                check(np.array_equal(t.memmap(tif, mode="r"), a), f"{dt} stack: tifffile.memmap")
            with open(os.path.join(mnt, "uint16", "data"), "r+b") as f:
                f.truncate(7 * 6 * 7 * 2)
            grown = np.concatenate([stacks["uint16"], np.zeros((2, 6, 7), "uint16")])
            check(np.array_equal(t.imread(os.path.join(mnt, "uint16", "data.tif")), grown), "uint16 stack after a growth: tifffile")
        finally:
            unmount(mnt)

    # Writes through np.load(mmap_mode="r+") land in the array.
    store = os.path.join(work, "rw.zarr")
    shutil.copytree(os.path.join(fixtures, "v3.zarr"), store)
    mnt = os.path.join(work, "mnt-rw")
    mount(store, mnt)
    try:
        view = np.load(os.path.join(mnt, "dtypes/float32/data.npy"), mmap_mode="r+")
        model = np.array(view)
        view[1:3, 2] = [41.5, -7.25]
        model[1:3, 2] = [41.5, -7.25]
        view.flush()
        del view
        raw = np.fromfile(os.path.join(mnt, "dtypes/float32/data"), dtype="<f4").reshape(model.shape)
        check(np.array_equal(raw, model, equal_nan=True), "memmap r+ write read back through data")
        # A growth through data: every view shows the new shape at once (new rows are fill).
        d = os.path.join(mnt, "dtypes/uint16")
        before = np.load(os.path.join(d, "data.npy"))
        with open(os.path.join(d, "data"), "r+b") as f:
            f.truncate((before.shape[0] + 2) * before.shape[1] * 2)
        fill = zarr.open_array(os.path.join(fixtures, "v3.zarr", "dtypes/uint16"), mode="r").fill_value
        grown = np.concatenate([before, np.full((2, before.shape[1]), fill, dtype=before.dtype)])
        reread(d, grown, "after a growth")
    finally:
        unmount(mnt)
    check(np.array_equal(zarr.open_array(os.path.join(store, "dtypes/float32"), mode="r")[...], model, equal_nan=True),
          "memmap r+ write read back by zarr-python")

    # A prepend (one chunk row of 3 in front, adopting the offset key encoding): every view shows
    # the new rows first.
    mount(store, mnt, "--adopt-offset")
    try:
        d = os.path.join(mnt, "dtypes/int16")
        before = np.load(os.path.join(d, "data.npy"))
        rows = np.arange(3 * before.shape[1], dtype="<i2").reshape(3, before.shape[1]) - 100
        with open(os.path.join(d, "prepend"), "wb") as f:
            f.write(rows.tobytes())
        after = np.concatenate([rows, before])
        reread(d, after, "after a prepend")
    finally:
        unmount(mnt)
finally:
    checks.detach_beneath(work)
    shutil.rmtree(work, ignore_errors=True)

sys.exit(check.finish())
