#!/usr/bin/env python3
"""Prepend interop: arrays prepended through a zarrfs mount are read by zarr-python 3.4 with a
small plugin for the `offset` chunk key encoding (docs/offset-encoding.md) — an independent decode
of what zarrfs wrote — and must equal a numpy model.

    scripts/check-prepend.py target/release/zarrfs
"""
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import zarr
from zarr.core.chunk_key_encodings import ChunkKeyEncoding
from zarr.registry import register_chunk_key_encoding


@dataclass(frozen=True)
class OffsetChunkKeyEncoding(ChunkKeyEncoding):
    """Key of grid cell g = the default key of g + offset."""

    name: ClassVar[str] = "offset"
    offset: tuple = ()
    separator: str = "/"

    def __post_init__(self):
        object.__setattr__(self, "offset", tuple(int(o) for o in self.offset))
        if self.separator not in ("/", "."):
            raise ValueError(f"separator {self.separator!r}")

    def encode_chunk_key(self, chunk_coords):
        if len(chunk_coords) != len(self.offset):
            raise ValueError("offset rank differs from the chunk coordinates")
        return self.separator.join(["c"] + [str(c + o) for c, o in zip(chunk_coords, self.offset)])

    def to_dict(self):
        return {"name": self.name, "configuration": {"offset": list(self.offset), "separator": self.separator}}


register_chunk_key_encoding("offset", OffsetChunkKeyEncoding)
RESULTS = {"passed": 0, "failed": 0}

# Run in a process of its own: zarr-python without the plugin above, and tensorstore.
STOCK_READ = """
import sys, numpy as np, zarr, tensorstore as ts
store, name, want = sys.argv[1], sys.argv[2], np.load(sys.argv[3])
got = zarr.open_array(store, path=name, mode="r")[...]
assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True), "zarr-python"
t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{store}/{name}"}}).result().read().result()
assert np.array_equal(t, want, equal_nan=True), "tensorstore"
"""


def check(name, got, want):
    if np.array_equal(got, want, equal_nan=True) and got.shape == want.shape:
        RESULTS["passed"] += 1
    else:
        RESULTS["failed"] += 1
        print(f"MISMATCH {name}: {got.shape} vs {want.shape}")


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/zarrfs")
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as work:
        store = os.path.join(work, "p.zarr")
        root = zarr.open_group(store, mode="w")
        cases = {
            "plain": dict(shape=(5, 7), chunks=(2, 3), dtype="float32", fill_value=np.nan),
            "sharded": dict(shape=(6, 4), chunks=(1, 2), shards=(2, 4), dtype="int32", fill_value=-1),
            "dotted": dict(shape=(3, 2, 4), chunks=(3, 1, 3), dtype="uint16", fill_value=7,
                           chunk_key_encoding={"name": "default", "separator": "."}),
        }
        models = {}
        for name, kw in cases.items():
            a = root.create_array(name, **kw)
            models[name] = (rng.standard_normal(kw["shape"]) * 100).astype(kw["dtype"])
            a[...] = models[name]
        mnt = os.path.join(work, "mnt")
        os.makedirs(mnt)
        subprocess.run([binary, "mount", store, mnt, "--adopt-offset"], check=True)
        try:
            for name, kw in cases.items():
                outer = kw.get("shards", kw["chunks"])[0]
                for k in (2, 1):  # two prepends: 2 chunk rows, then 1
                    new = (rng.standard_normal((k * outer,) + kw["shape"][1:]) * 100).astype(kw["dtype"])
                    with open(os.path.join(mnt, name, "prepend"), "wb") as f:
                        f.write(new.astype(new.dtype.newbyteorder("<")).tobytes())
                    models[name] = np.concatenate([new, models[name]])
                # And an append at the end through data.
                tail = (rng.standard_normal((1,) + kw["shape"][1:]) * 100).astype(kw["dtype"])
                with open(os.path.join(mnt, name, "data"), "ab") as f:
                    f.write(tail.tobytes())
                models[name] = np.concatenate([models[name], tail])
                got = np.memmap(os.path.join(mnt, name, "data"), dtype=kw["dtype"], mode="r", shape=models[name].shape)
                check(f"mount {name}", np.array(got), models[name])
                del got
        finally:
            subprocess.run([binary, "unmount", mnt], check=True)
        for name in cases:
            a = zarr.open_array(store, path=name, mode="r")
            check(f"zarr-python + offset plugin {name}", a[...], models[name])
        # The way back: after `zarrfs normalize`, stock zarr-python (no plugin, a fresh process)
        # and tensorstore read the arrays.
        for name in cases:
            subprocess.run([binary, "normalize", store, name], check=True, capture_output=True)
            np.save(os.path.join(work, f"{name}.npy"), models[name])
            stock = subprocess.run([sys.executable, "-c", STOCK_READ, store, name, os.path.join(work, f"{name}.npy")],
                                   capture_output=True, text=True)
            check(f"stock zarr-python and tensorstore after normalize {name} ({stock.stderr.strip()[-300:]})",
                  np.array([stock.returncode]), np.array([0]))
    print(f"prepend: {RESULTS['passed']} passed, {RESULTS['failed']} failed")
    sys.exit(1 if RESULTS["failed"] else 0)


if __name__ == "__main__":
    main()
