#!/usr/bin/env python3
"""Write the test fixtures: small stores by zarr-python 3.4 and tensorstore, and the bytes each
array's `data` file must show (C order, little-endian).

    scripts/make-fixtures.py            # rewrites tests/fixtures/ and demo/weather.zarr
    scripts/make-fixtures.py demo       # rewrites demo/weather.zarr only
    scripts/make-fixtures.py ome        # rewrites tests/fixtures/ome (OME-Zarr images) only
    scripts/make-fixtures.py climate    # rewrites tests/fixtures/climate (xarray datasets) only
    scripts/make-fixtures.py zip        # rewrites tests/fixtures/zip (zarr-python's ZipStore) only
    scripts/make-fixtures.py icechunk   # rewrites tests/fixtures/icechunk (Python icechunk) only

Output:
  tests/fixtures/<store>.zarr/...           the stores
  tests/fixtures/expected/<store>/<path>.bin  expected bytes of each array
  tests/fixtures/expected.json              {"<store>/<path>": {"bin": ..., "shape": ..., "dtype": ...,
                                             "bad_ranges": [[start, end], ...]}}  (damaged arrays only)
"""
import json
import os
import shutil
import sys
import tempfile

import numcodecs
import numpy as np
from textview import text_view
import tensorstore as ts
import zarr
from zarr.core.dtype import VariableLengthBytes
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                         TransposeCodec, ZstdCodec)

zarr.config.set({"array.rectilinear_chunks": True})
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures")
EXPECTED = {}
RNG = np.random.default_rng(20261130)


def flat_bytes(a):
    """What `data` shows: C order, each element little-endian."""
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()






def record_text(store, path, values, bytes_type):
    rel = os.path.join("expected", store, path + ".bin")
    full = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(text_view(values, bytes_type))
    EXPECTED[f"{store}/{path}"] = {"bin": rel, "text": True}


def record(store, path, arr, bad_ranges=None):
    """Record the expected bytes of the array at store/path, read back with zarr-python."""
    data = arr[...] if arr.ndim else np.asarray(arr[()])
    if data.dtype.kind in "OT" or isinstance(data.dtype, np.dtypes.StringDType):
        flat = data.reshape(-1).tolist()
        return record_text(store, path, flat, isinstance(flat[0], bytes) if flat else False)
    rel = os.path.join("expected", store, path + ".bin")
    full = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    raw = bytearray(flat_bytes(data))
    for start, end in bad_ranges or []:
        raw[start:end] = bytes(end - start)
    with open(full, "wb") as f:
        f.write(raw)
    entry = {"bin": rel, "shape": list(data.shape), "dtype": str(data.dtype)}
    if bad_ranges:
        entry["bad_ranges"] = bad_ranges
    EXPECTED[f"{store}/{path}"] = entry


def sample(shape, dtype):
    """Distinct, non-trivial values of any supported dtype."""
    n = int(np.prod(shape)) if shape else 1
    dt = np.dtype(dtype)
    if dt.kind == "b":
        v = RNG.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        v = RNG.integers(max(info.min, -10**6), min(info.max, 10**6), n, endpoint=True).astype(dt)
        v[0] = info.max
    elif dt.kind == "f":
        v = (RNG.standard_normal(n) * 100).astype(dt)
    elif dt.kind == "c":
        v = (RNG.standard_normal(n) + 1j * RNG.standard_normal(n)).astype(dt)
    elif dt.kind in "mM":
        v = RNG.integers(-10**9, 10**9, n).astype("i8").view(dt)
    elif dt.kind == "U":
        words = ["", "a", "héllo", "ÿ€𝄞", "zarr", "x y"]
        v = np.array([words[i % len(words)][: dt.itemsize // 4] for i in range(n)], dtype=dt)
    elif dt.kind == "S":
        v = np.array([bytes([97 + i % 26]) * (i % (dt.itemsize + 1)) for i in range(n)], dtype=dt)
    elif dt.kind == "V":
        v = np.frombuffer(RNG.integers(0, 256, n * dt.itemsize, dtype=np.uint8).tobytes(), dtype=dt)
    else:
        raise ValueError(dtype)
    return v.reshape(shape)


def write_partial(arr, values, skip_chunk=True):
    """Write every chunk but (optionally) the first one along axis 0 of the second row band, so
    missing chunks read as fill."""
    if arr.ndim == 0:
        arr[()] = values
        return
    arr[...] = values
    if skip_chunk and arr.shape[0] > arr.chunks[0]:
        c0 = arr.chunks[0]
        # Writing fill over a whole chunk makes zarr-python delete it: a missing chunk.
        region = tuple([slice(c0, 2 * c0)] + [slice(0, min(arr.chunks[i], arr.shape[i])) for i in range(1, arr.ndim)])
        arr[region] = arr.fill_value


def zarr_python_v3(name):
    path = os.path.join(OUT, name)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    plain = dict(compressors=None)

    dtypes = root.create_group("dtypes")
    for dt, fill in [("bool", True), ("int8", -3), ("int16", -1), ("int32", 7), ("int64", -9), ("uint8", 5),
                     ("uint16", 6), ("uint32", 7), ("uint64", 2**64 - 1), ("float16", 1.5), ("float32", -2.25),
                     ("float64", 1e300), ("complex64", 1 + 2j), ("complex128", -1j), ("datetime64[s]", None),
                     ("timedelta64[ms]", 3), ("<U5", "ab"), ("S4", b"xy"), ("V3", None)]:
        name_ = dt.replace("[", "_").replace("]", "").replace("<", "")
        kw = {} if fill is None else {"fill_value": fill}
        a = dtypes.create_array(name_, shape=(7, 5), chunks=(3, 2), dtype=dt, **kw)
        write_partial(a, sample((7, 5), dt))
        record(name, f"dtypes/{name_}", a)

    codecs = root.create_group("codecs")
    variants = {
        "bytes_big": dict(serializer=BytesCodec(endian="big"), **plain),
        "transpose": dict(filters=[TransposeCodec(order=(1, 0, 2))], **plain),
        "transpose_zstd": dict(filters=[TransposeCodec(order=(2, 0, 1))], compressors=[ZstdCodec(level=3)]),
        "zstd_checksum": dict(compressors=[ZstdCodec(level=5, checksum=True)]),
        "gzip": dict(compressors=[GzipCodec(level=6)]),
        "crc32c": dict(compressors=[Crc32cCodec()]),
        "gzip_crc32c": dict(compressors=[GzipCodec(level=1), Crc32cCodec()]),
    }
    # numcodecs ships C-Blosc without snappy; the unit tests cover it.
    for cname in ["lz4", "lz4hc", "blosclz", "zstd", "zlib"]:
        for shuffle in ["noshuffle", "shuffle", "bitshuffle"]:
            variants[f"blosc_{cname}_{shuffle}"] = dict(compressors=[BloscCodec(cname=cname, clevel=5, shuffle=shuffle)])
    for vname, kw in variants.items():
        a = codecs.create_array(vname, shape=(9, 6, 4), chunks=(4, 3, 4), dtype="int32", fill_value=-5, **kw)
        write_partial(a, sample((9, 6, 4), "int32"))
        record(name, f"codecs/{vname}", a)
    # Tiny chunks make blosc store memcpyed frames.
    a = codecs.create_array("blosc_tiny", shape=(10,), chunks=(3,), dtype="uint16",
                            compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")])
    a[...] = np.arange(10, dtype="uint16")
    record(name, "codecs/blosc_tiny", a)

    sharded = root.create_group("sharded")
    a = sharded.create_array("end", shape=(10, 9), chunks=(2, 3), shards=(4, 6), dtype="float32", fill_value=-1.0)
    a[...] = sample((10, 9), "float32")
    a[0:2, 0:3] = -1.0       # an empty inner chunk
    a[4:8, 0:6] = -1.0       # a whole missing shard
    record(name, "sharded/end", a)
    a = sharded.create_array("start", shape=(10, 9), chunks=(4, 6), dtype="uint16", fill_value=3, compressors=None,
                             serializer=ShardingCodec(chunk_shape=(2, 3), codecs=[BytesCodec(), ZstdCodec()],
                                                      index_location="start"))
    a[...] = sample((10, 9), "uint16")
    a[2:4, 3:6] = 3
    record(name, "sharded/start", a)
    a = sharded.create_array("transposed_inner", shape=(8, 8), chunks=(4, 4), dtype="int16", compressors=None,
                             serializer=ShardingCodec(chunk_shape=(2, 2), codecs=[TransposeCodec(order=(1, 0)), BytesCodec(endian="big"), GzipCodec()]))
    a[...] = sample((8, 8), "int16")
    record(name, "sharded/transposed_inner", a)

    shapes = root.create_group("shapes")
    a = shapes.create_array("d0", shape=(), dtype="float64", fill_value=0.0)
    a[()] = 3.25
    record(name, "shapes/d0", a)
    a = shapes.create_array("d0_missing", shape=(), dtype="int32", fill_value=42)
    record(name, "shapes/d0_missing", a)
    a = shapes.create_array("d1", shape=(17,), chunks=(5,), dtype="uint8", fill_value=9)
    write_partial(a, sample((17,), "uint8"))
    record(name, "shapes/d1", a)
    a = shapes.create_array("d3", shape=(5, 6, 7), chunks=(2, 4, 3), dtype="float64")
    write_partial(a, sample((5, 6, 7), "float64"))
    record(name, "shapes/d3", a)
    a = shapes.create_array("d5", shape=(3, 2, 4, 3, 5), chunks=(2, 1, 3, 2, 2), dtype="int16", fill_value=-2)
    write_partial(a, sample((3, 2, 4, 3, 5), "int16"))
    record(name, "shapes/d5", a)
    a = shapes.create_array("empty_axis", shape=(0, 4), chunks=(2, 2), dtype="int32")
    record(name, "shapes/empty_axis", a)
    a = shapes.create_array("never_written", shape=(4, 3), chunks=(2, 2), dtype="int32", fill_value=11)
    record(name, "shapes/never_written", a)

    keys = root.create_group("keys")
    for kname, cke in [("dot", {"name": "default", "separator": "."}), ("v2_dot", {"name": "v2", "separator": "."}),
                       ("v2_slash", {"name": "v2", "separator": "/"})]:
        a = keys.create_array(kname, shape=(5, 4), chunks=(2, 3), dtype="int64", chunk_key_encoding=cke, fill_value=1)
        write_partial(a, sample((5, 4), "int64"))
        record(name, f"keys/{kname}", a)

    fills = root.create_group("fills")
    a = fills.create_array("nan", shape=(6, 5), chunks=(4, 2), dtype="float32", fill_value=np.nan)
    a[0:3, 0:3] = sample((3, 3), "float32")
    record(name, "fills/nan", a)
    a = fills.create_array("neg_inf", shape=(6,), chunks=(4,), dtype="float64", fill_value=-np.inf)
    a[0:2] = [1.0, 2.0]
    record(name, "fills/neg_inf", a)
    a = fills.create_array("complex_nan", shape=(3,), chunks=(2,), dtype="complex128", fill_value=complex(np.nan, -np.inf))
    a[0] = 1 + 1j
    record(name, "fills/complex_nan", a)

    g1 = root.create_group("g1")
    deep = g1.create_group("g2").create_group("g3")
    a = deep.create_array("arr", shape=(3, 3), chunks=(2, 2), dtype="int8", fill_value=-1)
    a[...] = np.arange(9, dtype="int8").reshape(3, 3)
    record(name, "g1/g2/g3/arr", a)
    g1.create_group("empty_group")
    # Things in the store that are not nodes.
    os.makedirs(os.path.join(path, "not_a_node", "c"), exist_ok=True)
    with open(os.path.join(path, "notes.txt"), "w") as f:
        f.write("not a node\n")


def zarr_python_v2(name):
    path = os.path.join(OUT, name)
    root = zarr.open_group(path, mode="w", zarr_format=2)
    variants = {
        "blosc_lz4": dict(compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1)),
        "blosc_zstd_bitshuffle": dict(compressors=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2)),
        "blosc_auto": dict(compressors=numcodecs.Blosc(cname="blosclz", clevel=5, shuffle=-1)),
        "zstd": dict(compressors=numcodecs.Zstd(level=1)),
        "zlib": dict(compressors=numcodecs.Zlib(level=1)),
        "gzip": dict(compressors=numcodecs.GZip(level=5)),
        "lz4": dict(compressors=numcodecs.LZ4(acceleration=1)),
        "none": dict(compressors=None),
        "delta": dict(filters=[numcodecs.Delta(dtype="<i4")], compressors=numcodecs.Zlib(level=1)),
        "order_f": dict(order="F", compressors=numcodecs.Zstd(level=1)),
        "order_f_delta": dict(order="F", filters=[numcodecs.Delta(dtype="<i4", astype="<i4")], compressors=None),
        "slash": dict(chunk_key_encoding={"name": "v2", "separator": "/"}, compressors=numcodecs.Zstd(level=1)),
    }
    for vname, kw in variants.items():
        a = root.create_array(vname, shape=(7, 5, 3), chunks=(3, 2, 2), dtype="int32", fill_value=-4, **kw)
        write_partial(a, sample((7, 5, 3), "int32"))
        record(name, vname, a)
    for dt, fill in [(">i4", 1), (">f8", np.nan), ("<U3", "q"), ("|S3", b"z"), ("<M8[ns]", None), ("|b1", False),
                     ("<c8", 0), ("<f2", -0.5), ("|V2", None)]:
        vname = "dt_" + dt.replace("[", "_").replace("]", "").replace("<", "le_").replace(">", "be_").replace("|", "")
        kw = {} if fill is None else {"fill_value": fill}
        a = root.create_array(vname, shape=(5, 4), chunks=(2, 3), dtype=dt, compressors=numcodecs.Zstd(level=1), **kw)
        write_partial(a, sample((5, 4), dt))
        record(name, vname, a)
    a = root.create_array("scalar", shape=(), dtype="<i8", fill_value=0)
    a[()] = -77
    record(name, "scalar", a)
    sub = root.create_group("sub")
    a = sub.create_array("nan_fill", shape=(6,), chunks=(4,), dtype="<f4", fill_value=np.nan)
    a[0:2] = [1.5, -2.5]
    record(name, "sub/nan_fill", a)


def tensorstore_v3(name):
    path = os.path.join(OUT, name)
    zarr.open_group(path, mode="w", zarr_format=3)
    def create(sub, metadata, values, region=None):
        t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(path, sub)},
                     "metadata": metadata, "create": True, "delete_existing": True}).result()
        if region is None:
            t.write(values).result()
        else:
            t[region].write(values).result()
        record(name, sub, zarr.open_array(os.path.join(path, sub), mode="r"))
    sharding = lambda loc, codecs: {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 2], "codecs": codecs,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": loc}}
    base = lambda shape, chunks, dt, fill, codecs: {"shape": shape, "data_type": dt, "fill_value": fill,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}}, "codecs": codecs}
    v = sample((6, 8), "uint8")
    create("sharded_end", base([6, 8], [4, 4], "uint8", 0, [sharding("end", [{"name": "bytes"}])]), v[:4, :6], np.s_[0:4, 0:6])
    v = sample((6, 8), "int32")
    create("sharded_start_zstd", base([6, 8], [4, 4], "int32", -7,
           [sharding("start", [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}])]),
           v[1:6, 2:7], np.s_[1:6, 2:7])
    v = sample((5, 4), "int16")
    create("plain", base([5, 4], [2, 3], "int16", -7, [{"name": "bytes", "configuration": {"endian": "little"}}]), v[:3], np.s_[0:3])
    v = sample((5, 4), "float64")
    create("blosc_transpose", base([5, 4], [2, 3], "float64", 0.5, [{"name": "transpose", "configuration": {"order": [1, 0]}},
           {"name": "bytes", "configuration": {"endian": "big"}},
           {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "shuffle", "typesize": 8, "blocksize": 0}}]), v)


def tensorstore_v2(name):
    path = os.path.join(OUT, name)
    zarr.open_group(path, mode="w", zarr_format=2)
    def create(sub, metadata, values, region):
        t = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": os.path.join(path, sub)},
                     "metadata": metadata, "create": True, "delete_existing": True}).result()
        t[region].write(values).result()
        record(name, sub, zarr.open_array(os.path.join(path, sub), mode="r"))
    create("zlib_f", {"shape": [5, 7], "chunks": [2, 3], "dtype": "<i4", "order": "F", "fill_value": 3,
                      "compressor": {"id": "zlib", "level": 1}}, sample((5, 6), "int32"), np.s_[0:5, 0:6])
    create("blosc_be", {"shape": [6], "chunks": [4], "dtype": ">f8", "fill_value": "NaN",
                        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}}, sample((4,), "float64"), np.s_[0:4])
    create("slash", {"shape": [4, 4], "chunks": [2, 2], "dtype": "<u2", "dimension_separator": "/", "fill_value": 0,
                     "compressor": None}, sample((2, 4), "uint16"), np.s_[2:4, :])


def rectilinear(name):
    """Rectilinear grids as zarr-python 3.4 writes them (explicit edges, runs, mixtures, an edge
    past the end after a shrink, growth by append, sharding over a rectilinear outer grid)."""
    path = os.path.join(OUT, name)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    a = root.create_array("explicit", shape=(6, 5), chunks=[[1, 2, 3], [2, 3]], dtype="int16", fill_value=-3)
    a[...] = sample((6, 5), "int16")
    a[1:3, 0:2] = -3  # chunk (1, 0) is all fill: missing
    record(name, "explicit", a)
    a = root.create_array("runs", shape=(12, 5), chunks=[[3, 3, 3, 3], 2], dtype="float64", fill_value=np.nan)
    a[0:9] = sample((9, 5), "float64")
    record(name, "runs", a)
    a = root.create_array("mixed", shape=(10, 4), chunks=[[1, 1, 1, 3, 4], 4], dtype="uint32", compressors=[ZstdCodec(level=2)])
    a[...] = sample((10, 4), "uint32")
    record(name, "mixed", a)
    a = root.create_array("overflow", shape=(8, 3), chunks=[[4, 4], 3], dtype="int8", fill_value=2)
    a[...] = sample((8, 3), "int8")
    a.resize((6, 3))
    record(name, "overflow", a)
    a = root.create_array("appended", shape=(10, 6), chunks=[[2, 2, 2, 4], 3], dtype="int32", fill_value=-1)
    a[...] = sample((10, 6), "int32")
    a.append(sample((3, 6), "int32"))
    record(name, "appended", a)
    a = root.create_array("sharded", shape=(12, 8), chunks=(2, 4), shards=[[4, 8], [8]], dtype="uint16", fill_value=5)
    a[...] = sample((12, 8), "uint16")
    a[0:2, 0:4] = 5
    record(name, "sharded", a)


def vlen(name):
    """Variable-length strings and bytes, v3 and v2, as zarr-python writes them."""
    path = os.path.join(OUT, name)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    words = ["alpha", "", "ümlaut ✓", "new\nline", "back\\slash", "carriage\rreturn", "tab\tin", "𝄞", "last"]
    a = root.create_array("strings_1d", shape=(11,), chunks=(4,), dtype=str)
    a[0:9] = np.array(words, dtype=object)
    record(name, "strings_1d", a)
    a = root.create_array("strings_2d", shape=(3, 4), chunks=(2, 3), dtype=str, fill_value="-")
    a[...] = np.array([[f"r{r}c{c}" * (c + 1) for c in range(4)] for r in range(3)], dtype=object)
    a[0:2, 0:3] = "-"  # an all-fill chunk: missing
    record(name, "strings_2d", a)
    a = root.create_array("bytes_1d", shape=(5,), chunks=(2,), dtype=VariableLengthBytes())
    a[...] = np.array([b"abc", b"", b"\xff\xfe not utf-8", b"line\nbreak", b"\\x41"], dtype=object)
    record(name, "bytes_1d", a)
    g2 = zarr.open_group(os.path.join(path, "v2"), mode="w", zarr_format=2)
    a = g2.create_array("strings", shape=(6,), chunks=(4,), dtype=str, compressors=numcodecs.Zstd(level=1))
    a[...] = np.array(["v2", "", "é", "x\\y", "a\nb", "z"], dtype=object)
    record(name, "v2/strings", a)


def zarrs_fixtures(name, src):
    """The zarrs-written stores (kept as committed: zarrs is a Rust library, not run here), with
    their expected text."""
    dst = os.path.join(OUT, name)
    shutil.copytree(src, dst)
    for root_, dirs, files in os.walk(dst):
        os.chmod(root_, 0o755)
        for f in files:
            os.chmod(os.path.join(root_, f), 0o644)
    with open(os.path.join(dst, "zarr.json"), "w") as f:
        json.dump({"zarr_format": 3, "node_type": "group"}, f)
    expected = json.load(open(os.path.join(dst, "expected.json")))
    for array, values in expected.items():
        doc = json.load(open(os.path.join(dst, array, "zarr.json")))
        bytes_type = doc["data_type"] != "string"
        record_text(name, array, [bytes(v) if bytes_type else v for v in values], bytes_type)


def damaged(name):
    """A store with damage: reads touching it must fail with EIO, everything else must read."""
    path = os.path.join(OUT, name)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    a = root.create_array("good", shape=(4,), chunks=(2,), dtype="int32")
    a[...] = [1, 2, 3, 4]
    record(name, "good", a)
    # The kernel reads whole pages, so damage is laid out in chunks of one page (4 KiB) each.
    # chunk c/1 garbage, c/2 truncated: bytes 4096..12288 unreadable.
    a = root.create_array("corrupt", shape=(8192,), chunks=(1024,), dtype="int32", compressors=[ZstdCodec(level=1)])
    a[...] = np.arange(1, 8193, dtype="int32")
    record(name, "corrupt", a, bad_ranges=[[4096, 8192], [8192, 12288]])
    with open(os.path.join(path, "corrupt", "c", "1"), "wb") as f:
        f.write(b"this is not a zstd frame")
    c2 = os.path.join(path, "corrupt", "c", "2")
    with open(c2, "rb") as f:
        data = f.read()
    with open(c2, "wb") as f:
        f.write(data[: len(data) // 2])
    # Uncompressed chunk of the wrong size.
    a = root.create_array("wrong_size", shape=(4096,), chunks=(2048,), dtype="int16", compressors=None)
    a[...] = np.arange(4096, dtype="int16")
    record(name, "wrong_size", a, bad_ranges=[[0, 4096]])
    with open(os.path.join(path, "wrong_size", "c", "0"), "ab") as f:
        f.write(b"\x00")
    # A shard whose index checksum fails; the other shard is fine.
    a = root.create_array("bad_index", shape=(16384,), chunks=(4096,), shards=(8192,), dtype="uint8", compressors=None)
    a[...] = np.arange(16384, dtype="int64").astype("uint8")
    record(name, "bad_index", a, bad_ranges=[[0, 8192]])
    s0 = os.path.join(path, "bad_index", "c", "0")
    with open(s0, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0xFF]))
    # Broken metadata of several kinds.
    def node(sub, text):
        os.makedirs(os.path.join(path, sub), exist_ok=True)
        with open(os.path.join(path, sub, "zarr.json"), "w") as f:
            f.write(text)
    node("bad_json", '{"zarr_format": 3, "node_type": ')
    good = json.load(open(os.path.join(path, "good", "zarr.json")))
    node("unknown_codec", json.dumps(dict(good, codecs=good["codecs"] + [{"name": "lzma42"}])))
    node("must_understand", json.dumps(dict(good, fancy_extension={"x": 1})))
    node("ignorable_field", json.dumps(dict(good, note={"must_understand": False, "x": 1})))
    shutil.copytree(os.path.join(path, "good", "c"), os.path.join(path, "ignorable_field", "c"))
    record(name, "ignorable_field", zarr.open_array(os.path.join(path, "good"), mode="r"))
    node("unsupported_dtype", json.dumps(dict(good, data_type={"name": "struct", "configuration": {"fields": []}})))


def demo():
    """The demo store: a day of a smooth temperature field (a warm blob drifting east, a daily
    cycle), and a small pressure grid."""
    path = os.path.join(ROOT, "demo", "weather.zarr")
    root = zarr.open_group(path, mode="w", zarr_format=3, attributes={"title": "zarrfs demo"})
    hours, nlat, nlon = 24, 16, 32
    h = np.arange(hours, dtype="float32")[:, None, None]
    lat = np.linspace(-1, 1, nlat, dtype="float32")[None, :, None]
    lon = np.linspace(-1, 1, nlon, dtype="float32")[None, None, :]
    centre = -0.8 + 1.6 * h / (hours - 1)
    blob = 12 * np.exp(-((lon - centre) ** 2 / 0.15 + lat ** 2 / 0.3))
    values = 8 + 6 * np.sin((h - 6) / 24 * 2 * np.pi) - 5 * lat ** 2 + blob
    t = root.create_array("temp", shape=(hours, nlat, nlon), chunks=(6, 8, 16), dtype="float32", fill_value=np.nan,
                          dimension_names=["hour", "lat", "lon"], attributes={"units": "degC", "long_name": "air temperature"})
    t[...] = values.astype("float32")
    for name, n, lo, hi in (("lat", nlat, -60.0, 60.0), ("lon", nlon, -90.0, 90.0)):
        c = root.create_array(name, shape=(n,), chunks=(n,), dtype="float32", fill_value=0, dimension_names=[name],
                              attributes={"units": "degrees"})
        c[...] = np.linspace(lo, hi, n, dtype="float32")
    s = root.create_group("surface")
    p = s.create_array("pressure", shape=(4, 6), chunks=(2, 6), dtype="int16", fill_value=-1)
    p[...] = (1013 + np.arange(24).reshape(4, 6)).astype("int16")


def ome_image(group, name, levels, axes, scales, zarr_format, channels=None, shards=None, version="0.4", extra=None):
    """An OME-NGFF image group: `levels` (numpy arrays, largest first) as arrays "0", "1", ...
    with their scales; `channels` as omero (label, colour) pairs."""
    g = group.create_group(name)
    for i, data in enumerate(levels):
        chunks = tuple(min(n, 16) if k >= data.ndim - 2 else 1 for k, n in enumerate(data.shape))
        kw = {"compressors": numcodecs.Zstd(level=1)} if zarr_format == 2 else {"compressors": [ZstdCodec(level=1)]}
        if zarr_format == 2:
            kw["chunk_key_encoding"] = {"name": "v2", "separator": "/"}
        else:
            kw["dimension_names"] = [a["name"] for a in axes]
        if shards is not None and zarr_format == 3:
            kw["shards"] = tuple(c * s for c, s in zip(chunks, shards))
        a = g.create_array(str(i), shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=0, **kw)
        a[...] = data
    multiscale = {"name": name, "axes": axes,
                  "datasets": [{"path": str(i), "coordinateTransformations": [{"type": "scale", "scale": s}]}
                               for i, s in enumerate(scales)]}
    omero = None
    if channels:
        omero = {"channels": [{"label": label, "color": colour, "active": True,
                               "window": {"start": 0, "end": 255, "min": 0, "max": 65535}} for label, colour in channels],
                 "rdefs": {"model": "color"}}
    if version == "0.4":
        multiscale["version"] = "0.4"
        attrs = {"multiscales": [multiscale]}
        if omero:
            attrs["omero"] = omero
    else:
        ome = {"version": "0.5", "multiscales": [multiscale]}
        if omero:
            ome["omero"] = omero
        attrs = {"ome": ome}
    attrs.update(extra or {})
    g.attrs.update(attrs)
    return g


def pyramid(data, n, spatial):
    """`n` levels of `data`, halving its last `spatial` axes by taking every other pixel."""
    out = [data]
    for _ in range(n - 1):
        index = tuple(slice(None, None, 2) if k >= data.ndim - spatial else slice(None) for k in range(data.ndim))
        out.append(out[-1][index])
    return out


def axis(name, kind, unit=None):
    a = {"name": name, "type": kind}
    if unit:
        a["unit"] = unit
    return a


def ome():
    """OME-Zarr images: 0.4 on Zarr v2 and 0.5 on Zarr v3 (sharded), 2-D to 5-D, with and without
    omero channels, a label image, a small plate, and images OME-TIFF cannot hold."""
    out = os.path.join(OUT, "ome")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    um = "micrometer"
    # 0.4 on v2.
    root = zarr.open_group(os.path.join(out, "v04.zarr"), mode="w", zarr_format=2)
    c, z, y, x = 2, 5, 64, 48
    cells = (np.arange(c * z * y * x, dtype="uint32") % 65521).astype("uint16").reshape(c, z, y, x)
    cells += (np.arange(c, dtype="uint16") * 1000)[:, None, None, None]
    czyx = [axis("c", "channel"), axis("z", "space", um), axis("y", "space", um), axis("x", "space", um)]
    g = ome_image(root, "cells", pyramid(cells, 3, 2), czyx, [[1, 2.0, 0.5 * 2 ** i, 0.5 * 2 ** i] for i in range(3)], 2,
                  channels=[("DAPI", "0000FF"), ("GFP", "00FF00")])
    labels = g.create_group("labels")
    labels.attrs["labels"] = ["nuclei"]
    nuclei = (np.arange(z * y * x, dtype="uint32") // 97).reshape(z, y, x)
    zyx = czyx[1:]
    ome_image(labels, "nuclei", pyramid(nuclei, 2, 2), zyx, [[2.0, 0.5 * 2 ** i, 0.5 * 2 ** i] for i in range(2)], 2,
              extra={"image-label": {"version": "0.4", "source": {"image": "../../"}}})
    # A time series whose third level also halves time: OME-TIFF leaves it out.
    t = 4
    movie = (np.arange(t * 40 * 30, dtype="uint32") % 251).astype("uint8").reshape(t, 40, 30)
    tyx = [axis("t", "time", "second"), axis("y", "space", um), axis("x", "space", um)]
    levels = pyramid(movie, 2, 2) + [movie[::2, ::4, ::4]]
    ome_image(root, "movie", levels, tyx, [[5.0, 1, 1], [5.0, 2, 2], [10.0, 4, 4]], 2)
    # A plate: one well, one field.
    plate = root.create_group("plate")
    plate.attrs["plate"] = {"version": "0.4", "rows": [{"name": "A"}], "columns": [{"name": "1"}],
                            "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}], "field_count": 1}
    well = plate.create_group("A").create_group("1")
    well.attrs["well"] = {"version": "0.4", "images": [{"path": "0"}]}
    field = np.linspace(0, 1, 3 * 32 * 24, dtype="float32").reshape(3, 32, 24)
    ome_image(well, "0", pyramid(field, 2, 2), [axis("c", "channel")] + zyx[1:],
              [[1, 0.65 * 2 ** i, 0.65 * 2 ** i] for i in range(2)], 2, channels=[("A", "FF0000"), ("B", "00FF00"), ("C", "0000FF")])
    # 0.5 on v3, sharded.
    root = zarr.open_group(os.path.join(out, "v05.zarr"), mode="w", zarr_format=3)
    shape = (2, 3, 4, 40, 50)
    embryo = (np.arange(np.prod(shape), dtype="uint32") % 4093).astype("uint16").reshape(shape)
    tczyx = [axis("t", "time", "minute"), axis("c", "channel"), axis("z", "space", um), axis("y", "space", um),
             axis("x", "space", um)]
    ome_image(root, "embryo", pyramid(embryo, 2, 2), tczyx, [[2.0, 1, 1.5, 0.25 * 2 ** i, 0.25 * 2 ** i] for i in range(2)], 3,
              channels=[("red", "FF0000"), ("green", "00FF00"), ("blue", "0000FF")], shards=(1, 1, 2, 2, 2), version="0.5")
    flat = (np.arange(128 * 96, dtype="uint32") % 256).astype("uint8").reshape(128, 96)
    ome_image(root, "slide", pyramid(flat, 4, 2), [axis("y", "space", "nanometer"), axis("x", "space", "nanometer")],
              [[250 * 2 ** i, 250 * 2 ** i] for i in range(4)], 3, version="0.5")
    ome_image(root, "float_zyx", [np.linspace(-1, 1, 3 * 20 * 30, dtype="float32").reshape(3, 20, 30)], zyx,
              [[1.0, 0.3, 0.3]], 3, version="0.5")
    # Images OME-TIFF cannot hold: a custom axis type, x and y downsampled by different factors.
    ome_image(root, "custom_axis", [np.zeros((2, 8, 8), dtype="uint8")], [axis("w", "wavelength")] + zyx[1:],
              [[1, 1, 1]], 3, version="0.5")
    ome_image(root, "odd_factor", pyramid(np.zeros((12, 12), dtype="uint8"), 2, 2), zyx[1:], [[1, 1], [3, 2]], 3,
              version="0.5")


WGS84_WKT = ('GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]],'
             'AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0,AUTHORITY["EPSG","8901"]],UNIT["degree",0.0174532925199433,'
             'AUTHORITY["EPSG","9122"]],AXIS["Latitude",NORTH],AXIS["Longitude",EAST],AUTHORITY["EPSG","4326"]]')


def zip_store():
    """zarr-python's ZipStore: arrays written into a zip archive (a sharded one among them), then
    one chunk rewritten in append mode, which leaves two entries of its name (the last counts),
    with the bytes each array's `data` must show."""
    import warnings
    import zipfile
    from zarr.codecs import ZstdCodec
    out = os.path.join(OUT, "zip")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "expected"))
    path = os.path.join(out, "zarr-python.zip")
    store = zarr.storage.ZipStore(path, mode="w")
    root = zarr.open_group(store, mode="w", zarr_format=3, attributes={"made by": "zarr-python ZipStore"})
    plain = root.create_array("plain", shape=(10, 7), chunks=(4, 3), dtype="int16", fill_value=-1)
    plain[...] = np.arange(70, dtype="int16").reshape(10, 7)
    sharded = root.create_array("sharded", shape=(12, 10), chunks=(3, 5), shards=(6, 10), dtype="float32",
                                compressors=ZstdCodec(level=3), fill_value=0)
    sharded[...] = RNG.standard_normal((12, 10)).astype("float32")
    store.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name: that is the point
        store = zarr.storage.ZipStore(path, mode="a")
        plain = zarr.open_array(store, path="plain", mode="r+")
        plain[0:4, 0:3] = 1000
        store.close()
    names = zipfile.ZipFile(path).namelist()
    assert len(names) != len(set(names)), "the rewrite left a duplicate entry"
    store = zarr.storage.ZipStore(path, mode="r")
    root = zarr.open_group(store, mode="r")
    for name in ("plain", "sharded"):
        with open(os.path.join(out, "expected", name + ".bin"), "wb") as f:
            f.write(flat_bytes(root[name][...]))
    store.close()


def icechunk_repo():
    """An Icechunk repository by Python icechunk: a first commit (tagged v1) with one array,
    a second on main that rewrites part of it and adds a sharded one, with the bytes each
    array's `data` must show at the branch and at the tag."""
    import icechunk
    out = os.path.join(OUT, "icechunk")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "expected", "main"))
    os.makedirs(os.path.join(out, "expected", "v1"))
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(os.path.join(out, "repo")))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3, attributes={"made by": "Python icechunk"})
    plain = root.create_array("plain", shape=(10, 7), chunks=(4, 3), dtype="int16", fill_value=-1,
                              dimension_names=["y", "x"])
    plain[...] = np.arange(70, dtype="int16").reshape(10, 7)
    first = session.commit("first: plain")
    repo.create_tag("v1", first)
    with open(os.path.join(out, "expected", "v1", "plain.bin"), "wb") as f:
        f.write(flat_bytes(plain[...]))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="r+")
    root["plain"][0:4, 0:3] = 1000
    # Shards past Icechunk's inline threshold (512 bytes): stored as chunk objects.
    sharded = root.create_group("g").create_array("sharded", shape=(48, 40), chunks=(6, 10), shards=(24, 40),
                                                  dtype="float32", compressors=ZstdCodec(level=3), fill_value=0)
    sharded[...] = RNG.standard_normal((48, 40)).astype("float32")
    session.commit("second: plain rewritten, g/sharded added")
    root = zarr.open_group(repo.readonly_session("main").store, mode="r")
    for name in ("plain", "g/sharded"):
        with open(os.path.join(out, "expected", "main", name.replace("/", "-") + ".bin"), "wb") as f:
            f.write(flat_bytes(root[name][...]))
    with open(os.path.join(out, "expected", "v1.snapshot"), "w") as f:
        f.write(first)


def climate():
    """xarray datasets: a Pangeo-style one (air temperature on a 0-360 grid with descending
    latitudes, CF times, NaN fill, a CF grid mapping, packed int16 with scale_factor and
    add_offset, a 0-d variable, an integer fill), as Zarr v2 (consolidated) and v3 (with a
    sharded variable), and a GeoZarr-described projected raster (EPSG:32633)."""
    import pandas as pd
    import xarray as xr
    out = os.path.join(OUT, "climate")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    time = pd.date_range("2013-01-01", periods=4, freq="6h")
    lat = np.arange(75.0, 15.0 - 1, -7.5, dtype="float32")          # descending
    lon = np.arange(200.0, 330.0 + 1, 10.0, dtype="float32")        # 0-360
    rng = np.random.default_rng(7)
    air = (250 + 30 * rng.random((len(time), len(lat), len(lon)))).astype("float32")
    air[0, 0, :3] = np.nan
    ds = xr.Dataset(
        {"air": (("time", "lat", "lon"), air, {"units": "degK", "long_name": "4xDaily Air temperature at sigma level 995",
                                               "standard_name": "air_temperature", "grid_mapping": "crs",
                                               "actual_range": [185.16, 322.1]}),
         "t2m": (("time", "lat", "lon"), np.round((air - 273.15) / 0.01).astype("int16"),
                 {"units": "degC", "scale_factor": 0.01, "add_offset": 0.0}),
         "flags": (("lat", "lon"), (np.arange(len(lat) * len(lon)) % 5).astype("int32").reshape(len(lat), len(lon)),
                   {"flag_values": [0, 1, 2, 3, 4]}),
         "crs": ((), np.int32(0), {"grid_mapping_name": "latitude_longitude", "crs_wkt": WGS84_WKT, "epsg_code": "EPSG:4326"})},
        coords={"time": time, "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
                "lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude"})},
        attrs={"Conventions": "CF-1.8", "title": "4x daily NMC reanalysis (a slice)", "history": {"nested": "left out"}})
    encoding = {"t2m": {"_FillValue": -32767}, "flags": {"_FillValue": -1}}
    ds.to_zarr(os.path.join(out, "v2.zarr"), zarr_format=2, consolidated=True, encoding=encoding)
    ds.to_zarr(os.path.join(out, "v3.zarr"), zarr_format=3, consolidated=True,
               encoding=dict(encoding, air={"shards": (2, 9, 14), "chunks": (1, 9, 7)}))
    # GeoZarr: a projected raster, its transform and CRS in its attributes.
    g = zarr.open_group(os.path.join(out, "utm.zarr"), mode="w", zarr_format=3)
    band = g.create_array("band", shape=(20, 30), chunks=(10, 15), dtype="uint16", fill_value=0, dimension_names=["y", "x"],
                          attributes={"spatial:transform": [10.0, 0.0, 500000.0, 0.0, -10.0, 6000200.0],
                                      "spatial:dimensions": ["y", "x"], "proj:code": "EPSG:32633", "_FillValue": 0})
    band[...] = (np.arange(600) % 1000).astype("uint16").reshape(20, 30)


def codecs():
    """Every numcodecs codec zarr-python 3 writes, in v3 documents (`numcodecs.*`) and as v2
    filters and compressors, plus zarr-python's own `scale_offset`. Codecs that take any value
    written (check-writes writes them) and the others (lossy ones read-only) in separate stores."""
    from zarr.codecs import numcodecs as N
    from zarr.codecs.scale_offset import ScaleOffset
    from zarr.codecs import CastValue
    for name in ["codecs.zarr", "codecs_v2.zarr", "codecs_lossy.zarr", "codecs_lossy_v2.zarr"]:
        if os.path.exists(os.path.join(OUT, name)):
            shutil.rmtree(os.path.join(OUT, name))
    f8, i4 = sample((9, 7), "<f8"), sample((9, 7), "<i4")
    bits = sample((9, 7), "bool")
    v3 = {  # name: (dtype, values, create_array arguments)
        "zlib": ("<f8", f8, dict(compressors=[N.Zlib(level=3)])),
        "gzip": ("<f8", f8, dict(compressors=[N.GZip(level=2)])),
        "zstd": ("<f8", f8, dict(compressors=[N.Zstd(level=2)])),
        "lz4": ("<f8", f8, dict(compressors=[N.LZ4()])),
        "blosc": ("<f8", f8, dict(compressors=[N.Blosc(cname="zstd", clevel=3, shuffle=1)])),
        "bz2": ("<i4", i4, dict(compressors=[N.BZ2(level=5)])),
        "lzma": ("<i4", i4, dict(compressors=[N.LZMA()])),
        "shuffle_zlib": ("<f8", f8, dict(compressors=[N.Shuffle(), N.Zlib(level=4)])),
        "crc32": ("<i4", i4, dict(compressors=[N.CRC32()])),
        "crc32c": ("<i4", i4, dict(compressors=[N.CRC32C()])),
        "adler32": ("<i4", i4, dict(compressors=[N.Adler32()])),
        "fletcher32": ("<i4", i4, dict(compressors=[N.Zstd(level=1), N.Fletcher32()])),
        "jenkins_lookup3": ("<i4", i4, dict(compressors=[N.JenkinsLookup3()])),
        "delta": ("<i4", i4, dict(filters=[N.Delta(dtype="<i4")], compressors=[N.Zlib(level=1)])),
        "astype_widening": ("<i4", i4, dict(filters=[N.AsType(encode_dtype="<i8", decode_dtype="<i4")], compressors=None)),
        "packbits": ("bool", bits, dict(filters=[N.PackBits()], compressors=None)),
        "sharded_shuffle": ("<f8", f8, dict(shards=(6, 4), compressors=[N.Shuffle(), N.Zlib(level=1)])),
        "cast_value_widening": ("<i4", i4, dict(filters=[CastValue(data_type="int64")], compressors=[N.Zlib(level=1)])),
        "pcodec": ("<f8", f8, dict(serializer=N.PCodec(level=8), compressors=None)),
        "pcodec_delta": ("<i4", i4, dict(serializer=N.PCodec(level=4, delta_spec="try_consecutive", delta_encoding_order=1),
                                         compressors=None)),
        "pcodec_sharded": ("<f8", f8, dict(shards=(6, 4), serializer=N.PCodec(level=8, mode_spec="classic"), compressors=None)),
    }
    lossy_v3 = {  # and scale_offset, whose integers refuse values out of range when written
        "scale_offset": ("<i4", i4 // 4, dict(filters=[ScaleOffset(offset=5, scale=2)], compressors=None)),
        "fixedscaleoffset": ("<f8", f8, dict(filters=[N.FixedScaleOffset(offset=1, scale=10, dtype="<f8", astype="<i2")], compressors=None)),
        "quantize": ("<f8", f8, dict(filters=[N.Quantize(digits=2, dtype="<f8")], compressors=[N.Zlib(level=1)])),
        "bitround": ("<f8", f8, dict(filters=[N.BitRound(keepbits=8)], compressors=[N.Zstd(level=1)])),
        "astype_narrowing": ("<f8", f8, dict(filters=[N.AsType(encode_dtype="<f4", decode_dtype="<f8")], compressors=None)),
        "delta_float": ("<f4", f8.astype("<f4"), dict(filters=[N.Delta(dtype="<f4")], compressors=None)),
        # float64 stored as int16 (rounded half away from zero, clamped) with NaN as -32768; int32
        # stored as uint8 modulo 256.
        "cast_value": ("<f8", np.where(np.arange(f8.size).reshape(f8.shape) % 11 == 3, np.nan, f8 * 400),
                       dict(filters=[CastValue(data_type="int16", rounding="nearest-away", out_of_range="clamp",
                                               scalar_map={"encode": [("NaN", -32768)], "decode": [(-32768, "NaN")]})],
                            compressors=None)),
        "cast_value_wrap": ("<i4", i4, dict(filters=[CastValue(data_type="uint8", out_of_range="wrap")], compressors=None)),
    }
    v2 = {
        "shuffle_zlib": ("<f8", f8, dict(filters=[numcodecs.Shuffle(elementsize=8)], compressors=numcodecs.Zlib(level=4))),
        "shuffle_be": (">i4", i4, dict(filters=[numcodecs.Shuffle(elementsize=4)], compressors=numcodecs.Zlib(level=1))),
        "fletcher32": ("<i4", i4, dict(filters=[numcodecs.Fletcher32()], compressors=None)),
        "crc32": ("<i4", i4, dict(compressors=numcodecs.CRC32())),
        "adler32": ("<i4", i4, dict(compressors=numcodecs.Adler32())),
        "jenkins_lookup3": ("<i4", i4, dict(compressors=numcodecs.JenkinsLookup3())),
        "packbits": ("|b1", bits, dict(filters=[numcodecs.PackBits()], compressors=None)),
        "astype_widening": ("<i4", i4, dict(filters=[numcodecs.AsType(encode_dtype="<i8", decode_dtype="<i4")], compressors=None)),
        "pcodec": ("<f8", f8, dict(compressors=numcodecs.PCodec(level=8))),
    }
    lossy_v2 = {
        "fixedscaleoffset": ("<f8", f8, dict(filters=[numcodecs.FixedScaleOffset(offset=1000, scale=10, dtype="<f8", astype="<u2")], compressors=None)),
        "fixedscaleoffset_be": (">f4", f8.astype(">f4"), dict(filters=[numcodecs.FixedScaleOffset(offset=0.5, scale=7, dtype=">f4", astype=">i4")], compressors=None)),
        "quantize": ("<f4", f8.astype("<f4"), dict(filters=[numcodecs.Quantize(digits=1, dtype="<f4")], compressors=numcodecs.Zlib(level=1))),
        "bitround": ("<f8", f8, dict(filters=[numcodecs.BitRound(keepbits=5)], compressors=None)),
    }
    for name, arrays, zarr_format in [("codecs.zarr", v3, 3), ("codecs_lossy.zarr", lossy_v3, 3),
                                       ("codecs_v2.zarr", v2, 2), ("codecs_lossy_v2.zarr", lossy_v2, 2)]:
        root = zarr.open_group(os.path.join(OUT, name), mode="w", zarr_format=zarr_format)
        for vname, (dt, values, kw) in arrays.items():
            fill = False if np.dtype(dt).kind == "b" else 0
            a = root.create_array(vname, shape=(9, 7), chunks=(3, 2) if "shards" in kw else (4, 3), dtype=dt,
                                  fill_value=fill, **kw)
            write_partial(a, values.astype(dt))
            record(name, vname, a)


def merge_expected():
    """Add this run's arrays to expected.json (the modes that write one set of fixtures)."""
    path = os.path.join(OUT, "expected.json")
    with open(path) as f:
        merged = json.load(f)
    written = {key.split("/", 1)[0] for key in EXPECTED}
    merged = {key: v for key, v in merged.items() if key.split("/", 1)[0] not in written}
    merged.update(EXPECTED)
    with open(path, "w") as f:
        json.dump(merged, f, indent=1, sort_keys=True)


def kerchunk_sets():
    """netCDF4 (HDF5: chunked with shuffle + zlib, fletcher32, contiguous) and netCDF3 files
    and the kerchunk reference sets that describe them, targets named relative to the set's
    directory (kerchunk keeps the path it is given). Expected bytes are what netCDF4 reads."""
    import netCDF4
    import kerchunk.hdf
    import kerchunk.netCDF3
    from kerchunk.combine import MultiZarrToZarr
    out = os.path.join(OUT, "kerchunk")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    rng = np.random.default_rng(58)
    here = os.getcwd()
    os.chdir(out)
    try:
        for i in range(2):
            with netCDF4.Dataset(f"day{i}.nc", "w", format="NETCDF4") as ds:
                ds.createDimension("time", 3)
                ds.createDimension("lat", 5)
                ds.createDimension("lon", 7)
                t = ds.createVariable("time", "f8", ("time",))
                t.units = "days since 2020-01-01"
                t[:] = np.arange(3) + 3 * i
                air = ds.createVariable("air", "f4", ("time", "lat", "lon"), zlib=True, shuffle=True, complevel=4, chunksizes=(1, 3, 4))
                air.units = "K"
                air[:] = (250 + 40 * rng.random((3, 5, 7))).astype("f4")
                q = ds.createVariable("q", "i2", ("time", "lat", "lon"), fletcher32=True, chunksizes=(2, 5, 7))
                q[:] = rng.integers(-300, 300, (3, 5, 7)).astype("i2")
                c = ds.createVariable("mask", "u1", ("lat", "lon"), contiguous=True)
                c[:] = (np.arange(35) % 3).reshape(5, 7).astype("u1")
            refs = kerchunk.hdf.SingleHdf5ToZarr(f"day{i}.nc", inline_threshold=0).translate()
            with open(f"day{i}.json", "w") as f:
                json.dump(refs, f)
        with netCDF4.Dataset("classic.nc", "w", format="NETCDF3_CLASSIC") as ds:
            ds.createDimension("y", 4)
            ds.createDimension("x", 6)
            v = ds.createVariable("temp", "f4", ("y", "x"))
            v[:] = np.arange(24, dtype="f4").reshape(4, 6) / 4
            w = ds.createVariable("count", "i4", ("y", "x"))
            w[:] = np.arange(24, dtype="i4").reshape(4, 6) * -3
        refs = kerchunk.netCDF3.NetCDF3ToZarr("classic.nc", inline_threshold=0).translate()
        with open("classic.json", "w") as f:
            json.dump(refs, f)
        combined = MultiZarrToZarr(["day0.json", "day1.json"], concat_dims=["time"], identical_dims=["lat", "lon"]).translate()
        with open("series.json", "w") as f:
            json.dump(combined, f)
        # The same series as a parquet set, 5 references to a record file (several per variable).
        import kerchunk.df
        kerchunk.df.refs_to_dataframe("series.json", "series.parq", record_size=5)
    finally:
        os.chdir(here)
    def held(name):
        """The variables a set describes (kerchunk leaves out what it cannot describe: `q`,
        behind HDF5's fletcher32, is not in kerchunk 0.2.10's sets)."""
        with open(os.path.join(out, name)) as f:
            return {key.split("/")[0] for key in json.load(f)["refs"]}
    for name in ["day0", "day1"]:
        with netCDF4.Dataset(os.path.join(out, f"{name}.nc")) as ds:
            for var in held(f"{name}.json") & {"air", "q", "mask", "time"}:
                record_array(f"kerchunk/{name}.json", var, ds[var][...])
    with netCDF4.Dataset(os.path.join(out, "classic.nc")) as ds:
        for var in held("classic.json") & {"temp", "count"}:
            record_array("kerchunk/classic.json", var, ds[var][...])
    days = [netCDF4.Dataset(os.path.join(out, f"day{i}.nc")) for i in range(2)]
    for var in held("series.json") & {"air", "q", "time"}:
        for name in ["series.json", "series.parq"]:
            record_array(f"kerchunk/{name}", var, np.concatenate([np.ma.getdata(d[var][...]) for d in days]))
    for d in days:
        d.close()


def tiff_sets():
    """TIFF files and the fsspec references tifffile writes for them (`write_fsspec`), with the
    imagecodecs codecs of their strips and tiles: LZW, PackBits, zstd, deflate, and the
    horizontal and floating point predictors (one RGB, whose predictor runs along axis -2)."""
    import tifffile
    out = os.path.join(OUT, "tiff-refs")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    rng = np.random.default_rng(60)
    gray = (np.arange(64 * 80).reshape(64, 80) * 7 % 1000 + rng.integers(0, 30, (64, 80))).astype("<u2")
    cases = {
        "lzw": (gray, {"compression": "lzw", "tile": (32, 32)}),
        "lzw_horizontal": (gray, {"compression": "lzw", "predictor": "horizontal", "tile": (32, 32)}),
        "packbits_strips": ((gray % 7).astype("u1"), {"compression": "packbits", "rowsperstrip": 16}),
        "zstd": (gray, {"compression": "zstd", "tile": (32, 32)}),
        "deflate_floatpred": ((gray / 7.5 - 40).astype("<f4"), {"compression": "zlib", "predictor": "floatingpoint", "tile": (32, 32)}),
        "rgb_lzw_horizontal": (np.stack([gray % 256, gray // 4 % 256, 255 - gray % 256], axis=-1).astype("u1"),
                               {"compression": "lzw", "predictor": "horizontal", "tile": (32, 32), "photometric": "rgb"}),
    }
    here = os.getcwd()
    os.chdir(out)
    try:
        for name, (data, options) in cases.items():
            tifffile.imwrite(f"{name}.tif", data, **options)
            with tifffile.imread(f"{name}.tif", aszarr=True) as store:
                store.write_fsspec(f"{name}.json", url=".")
            back = tifffile.imread(f"{name}.tif")
            assert np.array_equal(back, data), name
            record_array("tiff-refs", f"{name}.json", back)
    finally:
        os.chdir(here)


def record_array(store, path, values):
    """Record what a numpy array (not a zarr array) holds, as `record` does."""
    data = np.ma.getdata(values)
    rel = os.path.join("expected", store, path + ".bin")
    full = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(flat_bytes(data))
    EXPECTED[f"{store}/{path}"] = {"bin": rel, "shape": list(data.shape), "dtype": str(data.dtype)}


def main():
    if sys.argv[1:] == ["kerchunk"]:
        kerchunk_sets()
        merge_expected()
        print("tests/fixtures/kerchunk written")
        return
    if sys.argv[1:] == ["tiff"]:
        tiff_sets()
        merge_expected()
        print("tests/fixtures/tiff-refs written")
        return
    if sys.argv[1:] == ["codecs"]:
        codecs()
        merge_expected()
        print("tests/fixtures/codecs*.zarr written")
        return
    if sys.argv[1:] == ["climate"]:
        climate()
        print("tests/fixtures/climate written")
        return
    if sys.argv[1:] == ["demo"]:
        demo()
        print("demo/weather.zarr written")
        return
    if sys.argv[1:] == ["zip"]:
        zip_store()
        print("tests/fixtures/zip written")
        return
    if sys.argv[1:] == ["icechunk"]:
        icechunk_repo()
        print("tests/fixtures/icechunk written")
        return
    if sys.argv[1:] == ["ome"]:
        ome()
        print("tests/fixtures/ome written")
        return
    kept = tempfile.mkdtemp()
    zarrs = os.path.join(kept, "zarrs-vlen")
    shutil.copytree(os.path.join(OUT, "zarrs-vlen"), zarrs)
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    zarr_python_v3("v3.zarr")
    zarr_python_v2("v2.zarr")
    tensorstore_v3("tensorstore_v3.zarr")
    tensorstore_v2("tensorstore_v2.zarr")
    rectilinear("rectilinear.zarr")
    vlen("vlen.zarr")
    zarrs_fixtures("zarrs-vlen", zarrs)
    shutil.rmtree(kept)
    damaged("damaged.zarr")
    ome()
    climate()
    codecs()
    kerchunk_sets()
    tiff_sets()
    zip_store()
    icechunk_repo()
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(EXPECTED, f, indent=1, sort_keys=True)
    demo()
    print(f"{len(EXPECTED)} arrays written under {OUT}")


if __name__ == "__main__":
    main()
