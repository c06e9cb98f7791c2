#!/usr/bin/env python3
"""The hierarchy edited through a zarrfs mount with shell tools and Python's os/shutil, then
read by zarr-python 3.4 and tensorstore: stores made by zarr-python (v3 and v2, consolidated)
get groups (mkdir -p), arrays (cp of a document zarr-python wrote, then dd), attribute edits
(sed -i, vim -es), a shape edit, removals (rm -r, shutil.rmtree) and moves (mv, os.rename).
The result must equal a numpy model, refused edits must leave the store byte-identical, and the
consolidated metadata the mount kept must equal a fresh zarr.consolidate_metadata of the result.

    scripts/check-hierarchy.py target/release/zarrfs
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import tensorstore as ts
import zarr

warnings.filterwarnings("ignore", category=UserWarning)
RESULTS = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        RESULTS["passed"] += 1
    else:
        RESULTS["failed"] += 1
        print(f"FAIL {name} {detail}")


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True)


def digest(store):
    h = {}
    for d, _, files in os.walk(store):
        for f in files:
            p = os.path.join(d, f)
            h[os.path.relpath(p, store)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return h


def tree(group, prefix=""):
    """Every node under group (without consolidated metadata): path -> (kind, attributes)."""
    out = {}
    for name, node in sorted(group.members()):
        path = f"{prefix}{name}"
        out[path] = ("group" if isinstance(node, zarr.Group) else "array", dict(node.attrs))
        if isinstance(node, zarr.Group):
            out.update(tree(node, path + "/"))
    return out


def consolidated_dict(store):
    cm = zarr.open_group(store, mode="r", use_consolidated=True).metadata.consolidated_metadata
    return json.loads(json.dumps(cm.to_dict(), sort_keys=True, default=str)) if cm is not None else None


def run(binary, work, fmt):
    store = os.path.join(work, f"h{fmt}.zarr")
    root = zarr.open_group(store, mode="w", zarr_format=fmt, attributes={"title": "before"})
    a = root.create_group("g").create_array("a", shape=(4, 3), chunks=(2, 3), dtype="float64", fill_value=0.0,
                                            attributes={"units": "m"})
    a[...] = np.arange(12.0).reshape(4, 3)
    root.create_array("b", shape=(10,), chunks=(3,), dtype="uint8")[...] = np.arange(10, dtype="u1")
    zarr.consolidate_metadata(store)
    # The document of a new array, as zarr-python writes it.
    proto = os.path.join(work, f"proto{fmt}.zarr")
    zarr.create_array(proto, shape=(5, 2), chunks=(2, 2), dtype="int32", fill_value=-1, zarr_format=fmt,
                      attributes={"made": "by cp"})
    docs = ["zarr.json"] if fmt == 3 else [".zarray", ".zattrs"]
    new_values = np.arange(10, dtype="<i4").reshape(5, 2) * 11
    raw = os.path.join(work, f"new{fmt}.raw")
    new_values.tofile(raw)
    mnt = os.path.join(work, f"mnt{fmt}")
    os.makedirs(mnt)
    subprocess.run([binary, "mount", store, mnt], check=True)
    attrs_doc = "zarr.json" if fmt == 3 else ".zattrs"
    shape_doc = "zarr.json" if fmt == 3 else ".zarray"
    try:
        r = sh(f"mkdir -p {mnt}/new/sub/deeper && mkdir {mnt}/new/arr")
        check(f"v{fmt} mkdir -p", r.returncode == 0, r.stderr)
        for d in docs:
            r = sh(f"cp {proto}/{d} {mnt}/new/arr/{d}")
            check(f"v{fmt} cp {d}", r.returncode == 0, r.stderr)
        r = sh(f"dd if={raw} of={mnt}/new/arr/data conv=notrunc status=none")
        check(f"v{fmt} dd into the new array", r.returncode == 0, r.stderr)
        r = sh(f"sed -i 's/\"m\"/\"km\"/' {mnt}/g/a/{attrs_doc}")
        check(f"v{fmt} sed -i", r.returncode == 0, r.stderr)
        r = sh(f"vim -es -u NONE -c '%s/\"before\"/\"after\"/' -c wq {mnt}/{attrs_doc} </dev/null")
        check(f"v{fmt} vim -es", r.returncode == 0, r.stderr + r.stdout)
        path = os.path.join(mnt, "g", "a", shape_doc)
        doc = json.load(open(path))
        doc["shape"] = [6, 3]
        with open(path, "w") as f:  # truncate + write, as editors that save in place do
            json.dump(doc, f, indent=2)
        # Refused: a new data type, and a document that does not parse.
        before = digest(store)
        r = sh(f"sed -i 's/float64/int8/; s/<f8/|i1/' {path}")
        check(f"v{fmt} a dtype edit is refused", r.returncode != 0, r.stderr)
        r = sh(f"printf '{{\"zarr_format\":' | dd of={path} status=none")
        check(f"v{fmt} broken JSON is refused", r.returncode != 0, r.stderr)
        check(f"v{fmt} refused edits store nothing", digest(store) == before)
        r = sh(f"rm -r {mnt}/b")
        check(f"v{fmt} rm -r", r.returncode == 0, r.stderr)
        os.mkdir(os.path.join(mnt, "tmp"))
        shutil.rmtree(os.path.join(mnt, "tmp"))
        r = sh(f"mv {mnt}/new/sub {mnt}/sub2")
        check(f"v{fmt} mv of a group", r.returncode == 0, r.stderr)
        os.rename(os.path.join(mnt, "new", "arr"), os.path.join(mnt, "moved"))
    finally:
        subprocess.run([binary, "unmount", mnt], check=True)
    want_tree = {
        "g": ("group", {}), "g/a": ("array", {"units": "km"}), "moved": ("array", {"made": "by cp"}),
        "new": ("group", {}), "sub2": ("group", {}), "sub2/deeper": ("group", {}),
    }
    plain = zarr.open_group(store, mode="r", use_consolidated=False)
    got_tree = tree(plain)
    check(f"v{fmt} the hierarchy zarr-python sees", got_tree == want_tree, f"{got_tree}")
    check(f"v{fmt} root attributes", dict(plain.attrs) == {"title": "after"}, f"{dict(plain.attrs)}")
    want_a = np.concatenate([np.arange(12.0).reshape(4, 3), np.zeros((2, 3))])
    check(f"v{fmt} g/a by zarr-python", np.array_equal(plain["g/a"][...], want_a))
    check(f"v{fmt} moved by zarr-python", np.array_equal(plain["moved"][...], new_values))
    for path, want in [("g/a", want_a), ("moved", new_values)]:
        spec = {"driver": "zarr3" if fmt == 3 else "zarr", "kvstore": {"driver": "file", "path": os.path.join(store, path)}}
        got = ts.open(spec).result().read().result()
        check(f"v{fmt} {path} by tensorstore", np.array_equal(got, want))
    check(f"v{fmt} b is gone from the store", not os.path.exists(os.path.join(store, "b")))
    # Consolidated metadata as the mount kept it, against a fresh consolidation.
    kept = consolidated_dict(store)
    fresh_store = os.path.join(work, f"fresh{fmt}.zarr")
    shutil.copytree(store, fresh_store)
    zarr.consolidate_metadata(fresh_store)
    fresh = consolidated_dict(fresh_store)
    check(f"v{fmt} consolidated metadata lists the nodes", kept is not None and len(json.dumps(kept)) > 500, f"{kept}")
    check(f"v{fmt} consolidated metadata equals a fresh consolidation", kept == fresh,
          f"\n kept:  {json.dumps(kept, sort_keys=True)[:3000]}\n fresh: {json.dumps(fresh, sort_keys=True)[:3000]}")


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/zarrfs")
    if shutil.which("vim") is None:
        sys.exit("check-hierarchy: vim is needed (scripts/test installs it)")
    with tempfile.TemporaryDirectory() as work:
        for fmt in (3, 2):
            run(binary, work, fmt)
    print(f"hierarchy: {RESULTS['passed']} passed, {RESULTS['failed']} failed")
    sys.exit(1 if RESULTS["failed"] else 0)


if __name__ == "__main__":
    main()
