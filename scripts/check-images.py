#!/usr/bin/env python3
"""OME-Zarr images as bioimaging tools read them through a live mount. The fixtures
(tests/fixtures/ome: OME-NGFF 0.4 on Zarr v2, 0.5 on Zarr v3 with shards) are first validated by
ome-zarr-models. Then, for every image group, `image.ome.tif` is read by tifffile (an OME
series whose levels equal zarr-python's reads of the level arrays), by ome-types (its OME-XML:
sizes, physical sizes, channel names) and by Bio-Formats, the reader behind Fiji's importer,
QuPath and OMERO (ImageInfo: the sizes and resolutions; ImageConverter: each resolution's
pixels). Every level's `data.tif` is read by Bio-Formats as planes of rows and columns (never
RGB), `data.raw.nhdr` as NRRD, and no sidecar makes Bio-Formats take a sibling view for its
own format. SimpleITK opens `data.mhd`.

    scripts/check-images.py target/release/zarrfs [BIOFORMATS_JAR]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import ome_types
import SimpleITK as sitk
import tifffile
import zarr
from ome_zarr_models import open_ome_zarr

import checks

warnings.filterwarnings("ignore")

binary = os.path.abspath(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
jar = sys.argv[2] if len(sys.argv) > 2 else subprocess.run([os.path.join(here, "bioformats")], check=True,
                                                           capture_output=True, text=True).stdout.strip()
fixtures = os.path.join(here, "..", "tests", "fixtures", "ome")
check = checks.Checks("images")


def java(*args):
    return subprocess.run(["java", "-Xmx1g", "-cp", jar, *args], capture_output=True, text=True, timeout=300)


def bf_info(path):
    """What Bio-Formats' ImageInfo says of a file: its format and each series' sizes."""
    out = java("loci.formats.tools.ImageInfo", "-nopix", "-noflat", path)
    text = out.stdout + out.stderr
    fmt = re.search(r"Checking file format \[([^\]]+)\]", text)
    series = []
    for block in text.split("Series #")[1:]:
        field = lambda name: (re.search(rf"\t{name} = ([^\n]+)", block) or [None, None])[1]
        series.append({k: field(k) for k in ("Image count", "RGB", "Width", "Height", "SizeZ", "SizeC", "SizeT", "Resolutions")})
    return (fmt[1] if fmt else None), series, text


def bf_pixels(path, series, work):
    """Bio-Formats' read of one (flattened) series, written out by its converter and read back."""
    out = os.path.join(work, f"bf-{series}.ome.tif")
    if os.path.exists(out):
        os.remove(out)
    r = java("loci.formats.tools.ImageConverter", "-series", str(series), path, out)
    if r.returncode != 0:
        return None
    return tifffile.imread(out)


def images(group, prefix=""):
    """Every image group (multiscales in its attributes) beneath `group`."""
    attrs = group.attrs.asdict()
    if "multiscales" in attrs or "multiscales" in attrs.get("ome", {}):
        yield prefix.rstrip("/"), group
    for name, node in group.members():
        if isinstance(node, zarr.Group):
            yield from images(node, f"{prefix}{name}/")


def multiscale(group):
    attrs = group.attrs.asdict()
    return (attrs.get("ome", attrs))["multiscales"][0]


work = tempfile.mkdtemp(prefix="zarrfs-images-")
try:
    # The fixtures are OME-Zarr as ome-zarr-models reads the specification.
    for store, groups in (("v04.zarr", ["cells", "cells/labels/nuclei", "movie", "plate", "plate/A/1", "plate/A/1/0"]),
                          ("v05.zarr", ["embryo", "slide", "float_zyx"])):
        for g in groups:
            try:
                open_ome_zarr(zarr.open_group(os.path.join(fixtures, store, g), mode="r"))
                check(True, "")
            except Exception as e:
                check(False, f"{store}/{g}: ome-zarr-models: {e}")
    for store in ("v04.zarr", "v05.zarr"):
        mnt = os.path.join(work, "mnt-" + store)
        checks.mount(binary, os.path.join(fixtures, store), mnt, "--read-only")
        try:
            for path, group in images(zarr.open_group(os.path.join(fixtures, store), mode="r")):
                what = f"{store}/{path}"
                ms = multiscale(group)
                axes = [a["name"] for a in ms["axes"]]
                tif = os.path.join(mnt, path, "image.ome.tif")
                if not os.path.exists(tif):
                    check(path in ("custom_axis", "odd_factor"), f"{what}: no image.ome.tif")
                    continue
                level0 = group[ms["datasets"][0]["path"]]
                levels = [group[d["path"]] for d in ms["datasets"]]
                # The levels OME-TIFF holds: those that shrink y and x only.
                held = [a for a in levels if a.shape[:-2] == level0.shape[:-2]]
                with tifffile.TiffFile(tif) as t:
                    check(t.is_ome, f"{what}: tifffile is_ome")
                    s = t.series[0]
                    check(len(s.levels) == len(held), f"{what}: tifffile {len(s.levels)} levels, want {len(held)}")
                    for i, (lvl, arr) in enumerate(zip(s.levels, held)):
                        want = arr[...]
                        got = lvl.asarray()
                        check(got.size == want.size and np.array_equal(got.reshape(want.shape), want), f"{what}: tifffile level {i}")
                ome = ome_types.from_tiff(tif)
                px = ome.images[0].pixels
                n = dict(zip(axes, level0.shape))
                check((px.size_x, px.size_y, px.size_z, px.size_c, px.size_t) == (n["x"], n["y"], n.get("z", 1), n.get("c", 1), n.get("t", 1)),
                      f"{what}: ome-types sizes")
                scale = ms["datasets"][0]["coordinateTransformations"][0]["scale"]
                x_axis = ms["axes"][-1]
                if "unit" in x_axis:
                    check(abs(px.physical_size_x - scale[-1]) < 1e-9, f"{what}: ome-types PhysicalSizeX {px.physical_size_x}")
                attrs = group.attrs.asdict()
                channels = (attrs.get("ome", attrs)).get("omero", {}).get("channels", [])
                check([c.name for c in px.channels if c.name] == [c["label"] for c in channels], f"{what}: ome-types channel names")
                fmt, series, text = bf_info(tif)
                check(fmt == "OME-TIFF", f"{what}: Bio-Formats reads it as {fmt}")
                if series:
                    s0 = series[0]
                    check((int(s0["Width"]), int(s0["Height"]), int(s0["SizeZ"]), int(s0["SizeC"]), int(s0["SizeT"]))
                          == (n["x"], n["y"], n.get("z", 1), n.get("c", 1), n.get("t", 1)), f"{what}: Bio-Formats sizes {s0}")
                    check(s0["RGB"].startswith("false"), f"{what}: Bio-Formats RGB {s0['RGB']}")
                    check(int(s0["Resolutions"] or 1) == len(held), f"{what}: Bio-Formats resolutions {s0['Resolutions']}")
                else:
                    check(False, f"{what}: Bio-Formats: {text[-400:]}")
                # Each resolution's pixels, as Bio-Formats reads them (flattened: series i is level i).
                for i, arr in enumerate(held):
                    got = bf_pixels(tif, i, work)
                    want = arr[...]
                    check(got is not None and got.size == want.size and np.array_equal(got.reshape(want.shape), want),
                          f"{what}: Bio-Formats pixels of level {i}")
                # Every level's own views.
                for i, arr in enumerate(levels):
                    d = os.path.join(mnt, path, ms["datasets"][i]["path"])
                    want = arr[...]
                    planes = int(np.prod(want.shape[:-2]))
                    if os.path.exists(os.path.join(d, "data.tif")):
                        fmt, series, _ = bf_info(os.path.join(d, "data.tif"))
                        ok = fmt == "Tagged Image File Format" and series and series[0]["RGB"].startswith("false") \
                            and int(series[0]["Image count"]) == planes and int(series[0]["Width"]) == want.shape[-1]
                        check(ok, f"{what}/{i}: Bio-Formats reads data.tif as {fmt} {series[:1]}")
                        with tifffile.TiffFile(os.path.join(d, "data.tif")) as t:
                            series = t.series[0]
                            # tifffile names the axes it read (TZCYX, in the order it returns them).
                            # (a plain stack's pages are I or Q: the array's own order).
                            order = [c.lower() for c in series.axes if c.lower() in axes]
                            if sorted(order) != sorted(axes):
                                order = axes
                            got = series.asarray().reshape([want.shape[axes.index(a)] for a in order])
                            expect = np.transpose(want, [axes.index(a) for a in order])
                            check(np.array_equal(got, expect), f"{what}/{i}: tifffile data.tif as {series.axes}")
                    nhdr = os.path.join(d, "data.raw.nhdr")
                    # Bio-Formats' NRRD reader takes a fastest axis of 2 to 16 as RGB channels.
                    if os.path.exists(nhdr) and not (want.ndim >= 3 and 2 <= want.shape[-1] <= 16):
                        fmt, series, _ = bf_info(nhdr)
                        check(fmt == "NRRD" and series and int(series[0]["Width"]) == want.shape[-1]
                              and int(series[0]["Height"]) == want.shape[-2], f"{what}/{i}: Bio-Formats reads data.raw.nhdr as {fmt} {series[:1]}")
                    mhd = os.path.join(d, "data.mhd")
                    if os.path.exists(mhd):
                        img = sitk.GetArrayFromImage(sitk.ReadImage(mhd))
                        check(np.array_equal(img.reshape(want.shape), want), f"{what}/{i}: SimpleITK data.mhd")
                        spacing = sitk.ReadImage(mhd).GetSpacing()
                        if "unit" in x_axis and x_axis["unit"] == "micrometer":
                            scale_i = ms["datasets"][i]["coordinateTransformations"][0]["scale"]
                            check(abs(spacing[0] - scale_i[-1] / 1000) < 1e-9, f"{what}/{i}: SimpleITK spacing {spacing}")
                        # Bio-Formats has no MetaImage reader: it must say so, not read a sibling.
                        fmt, _, _ = bf_info(mhd)
                        check(fmt is None, f"{what}/{i}: Bio-Formats took data.mhd for {fmt}")
        finally:
            checks.unmount(binary, mnt)
finally:
    checks.detach_beneath(work)
    shutil.rmtree(work, ignore_errors=True)

sys.exit(check.finish())
