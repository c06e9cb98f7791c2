#!/usr/bin/env python3
"""Live interop check: mount each fixture store with zarrfs and compare every array's `data`
(read with numpy.memmap, as a legacy tool would) with what zarr-python reads from the store.

    scripts/check-interop.py target/release/zarrfs
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from textview import escape
import zarr

zarr.config.set({"array.rectilinear_chunks": True})

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORES = ["tests/fixtures/v3.zarr", "tests/fixtures/v2.zarr", "tests/fixtures/tensorstore_v3.zarr",
          "tests/fixtures/tensorstore_v2.zarr", "tests/fixtures/rectilinear.zarr", "tests/fixtures/vlen.zarr", "demo/weather.zarr",
          # Written by other tools (scripts/make-foreign-fixtures).
          "tests/fixtures/foreign/gdal_delta.zarr", "tests/fixtures/foreign/zarr2_strings.zarr",
          "tests/fixtures/foreign/zarr2_codecs.zarr"]




def little_endian(dtype):
    return dtype.newbyteorder("<") if dtype.byteorder in (">", "=") and dtype.kind not in "SVb" else dtype


def arrays(group, prefix=""):
    for name, node in group.members():
        path = f"{prefix}{name}"
        if isinstance(node, zarr.Group):
            yield from arrays(node, path + "/")
        else:
            yield path, node


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/zarrfs")
    passed = failed = 0
    for store in STORES:
        store_path = os.path.join(ROOT, store)
        with tempfile.TemporaryDirectory() as mnt:
            subprocess.run([binary, "mount", store_path, mnt, "-o", "ro"], check=True)
            try:
                for path, arr in arrays(zarr.open_group(store_path, mode="r")):
                    want = np.ascontiguousarray(arr[...])
                    if not os.path.exists(os.path.join(mnt, path, "data")):
                        error = os.path.join(mnt, path, "error")
                        failed += 1
                        print(f"MISSING {store}/{path}: {open(error).read().strip() if os.path.exists(error) else 'no data file'}")
                        continue
                    if want.dtype.kind in "OT" or isinstance(want.dtype, np.dtypes.StringDType):
                        values = want.reshape(-1).tolist()
                        text = b"".join(escape(v, isinstance(v, bytes)) for v in values)
                        with open(os.path.join(mnt, path, "data"), "rb") as f:
                            same = f.read() == text
                        passed, failed = passed + same, failed + (not same)
                        if not same:
                            print(f"MISMATCH {store}/{path} (text)")
                        continue
                    dtype = little_endian(want.dtype)
                    data = os.path.join(mnt, path, "data")
                    if os.path.getsize(data) == 0:
                        got = np.zeros(want.shape, dtype=dtype)
                    else:
                        got = np.memmap(data, dtype=dtype, mode="r", shape=want.shape)
                    same = got.tobytes() == want.astype(dtype).tobytes()
                    if same:
                        passed += 1
                    else:
                        failed += 1
                        print(f"MISMATCH {store}/{path}")
                    del got
            finally:
                subprocess.run([binary, "unmount", mnt], check=False)
    print(f"interop: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
