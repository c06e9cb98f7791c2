"""A high-content-screening plate of OME-NGFF images for the walk benchmarks: wells x fields x
levels arrays of metadata only (no chunk stored), Zarr v3 with OME-NGFF 0.5 or v2 with 0.4,
optionally with consolidated metadata (v2 `.zmetadata`, v3 `consolidated_metadata` in the
root's `zarr.json`, as zarr-python writes them).

    plate(store_dir, wells, fields, levels, fmt=3, consolidated=False)
"""

import json
import os


def plate(store, wells, fields, levels, fmt=3, consolidated=False, chunks=False):
    """Write the plate under `store`; with `chunks`, each array's chunks are stored too."""
    space = lambda n: {"name": n, "type": "space", "unit": "micrometer"}
    axes = [{"name": "c", "type": "channel"}, space("y"), space("x")]
    multiscale = {"axes": axes, "datasets": [{"path": str(l), "coordinateTransformations": [{"type": "scale", "scale": [1, 2 ** l, 2 ** l]}]}
                                             for l in range(levels)]}
    docs = {}

    def write(path, name, doc):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, name), "w") as f:
            json.dump(doc, f)
        docs[os.path.relpath(os.path.join(path, name), store)] = doc

    def group(path, attrs):
        if fmt == 3:
            write(path, "zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": attrs})
        else:
            write(path, ".zgroup", {"zarr_format": 2})
            write(path, ".zattrs", attrs)

    def array(path, n):
        if fmt == 3:
            write(path, "zarr.json", {"zarr_format": 3, "node_type": "array", "shape": [2, n, n], "data_type": "uint16",
                                      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, n, n]}},
                                      "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                                      "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                                      "dimension_names": ["c", "y", "x"]})
            keys = [os.path.join(path, "c", str(c), "0", "0") for c in range(2)]
        else:
            write(path, ".zarray", {"zarr_format": 2, "shape": [2, n, n], "chunks": [1, n, n], "dtype": "<u2", "fill_value": 0,
                                    "order": "C", "filters": None, "compressor": None, "dimension_separator": "/"})
            write(path, ".zattrs", {"_ARRAY_DIMENSIONS": ["c", "y", "x"]})
            keys = [os.path.join(path, str(c), "0", "0") for c in range(2)]
        for key in keys if chunks else []:
            os.makedirs(os.path.dirname(key), exist_ok=True)
            with open(key, "wb") as f:
                f.write(bytes(2 * n * n))

    group(store, {"plate": {"version": "0.5" if fmt == 3 else "0.4"}})
    for w in range(wells):
        row, col = chr(ord("A") + w // 12), str(w % 12 + 1)
        group(os.path.join(store, row), {})
        group(os.path.join(store, row, col), {"well": {"images": [{"path": str(f)} for f in range(fields)]}})
        for f in range(fields):
            image = os.path.join(store, row, col, str(f))
            group(image, {"ome": {"version": "0.5", "multiscales": [multiscale]}} if fmt == 3 else
                  {"multiscales": [dict(multiscale, version="0.4")]})
            for l in range(levels):
                array(os.path.join(image, str(l)), max(1, 64 >> l))
    if consolidated and fmt == 2:
        with open(os.path.join(store, ".zmetadata"), "w") as f:
            json.dump({"zarr_consolidated_format": 1, "metadata": docs}, f)
    elif consolidated:
        entries = {os.path.dirname(k): v for k, v in docs.items() if os.path.dirname(k)}
        for doc in entries.values():
            if doc["node_type"] == "group":
                doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": {}}
        root = docs["zarr.json"]
        root["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": entries}
        with open(os.path.join(store, "zarr.json"), "w") as f:
            json.dump(root, f)
