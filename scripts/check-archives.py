#!/usr/bin/env python3
"""Zip archives both ways with zarr-python and Python's zipfile: what `zarrfs pack` writes
(.zip, deflated .zip, .ozx) opens in zarr-python's ZipStore with the values of the store it was
packed from; an .ozx is in RFC-9's order (the root's zarr.json first, every zarr.json before any
chunk, breadth-first) with its comment; and a zarr-python ZipStore archive, served over HTTP by
Python's own server, reads through a mount with the values zarr-python reads from it.

    scripts/check-archives.py target/release/zarrfs
"""
import functools
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import zarr

from checks import Checks, arrays, detach_beneath, mount, unmount

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def same(a, b):
    if a.dtype.kind in "mM":  # NaT is not equal to itself: compare the integers
        return a.dtype == b.dtype and np.array_equal(a.view("i8"), b.view("i8"))
    if a.dtype.kind == "f" or a.dtype.kind == "c":
        return np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


def main():
    binary = os.path.abspath(sys.argv[1])
    check = Checks("check-archives")
    work = tempfile.mkdtemp()
    try:
        for store, name, extra in [("v3.zarr", "v3.zip", []), ("v3.zarr", "v3-deflated.zip", ["--deflate"]),
                                   ("v2.zarr", "v2.zip", []), ("ome/v05.zarr", "v05.ozx", [])]:
            source, archive = os.path.join(FIXTURES, store), os.path.join(work, name)
            subprocess.run([binary, "pack", source, archive, *extra], check=True, stdout=subprocess.DEVNULL)
            z = zipfile.ZipFile(archive)
            check(z.testzip() is None, f"{name}: every entry's CRC")
            names = z.namelist()
            check(len(names) == len(set(names)), f"{name}: one entry per key")
            want = zarr.open_group(source, mode="r")
            got = zarr.open_group(zarr.storage.ZipStore(archive, mode="r"), mode="r")
            expected = dict(arrays(want))
            for path, arr in arrays(got):
                other = expected.pop(path, None)
                if other is None:
                    check(False, f"{name}: {path} is not in {store}")
                    continue
                try:
                    values = other[...]
                except Exception:  # a data type zarr-python reads from neither store
                    continue
                check(same(arr[...], values), f"{name}: {path} values")
            check(not expected, f"{name}: arrays missing from the archive: {sorted(expected)[:5]}")
            if name.endswith(".ozx"):
                documents = [n for n in names if n.rsplit("/", 1)[-1] == "zarr.json"]
                check(names[0] == "zarr.json", f"{name}: the root's zarr.json is the first entry")
                check(names[:len(documents)] == documents, f"{name}: every zarr.json before any chunk")
                depths = [d.count("/") for d in documents]
                check(depths == sorted(depths), f"{name}: zarr.json files breadth-first")
                infos = z.infolist()
                check(all(i.compress_type == zipfile.ZIP_STORED for i in infos), f"{name}: entries stored, not compressed")
                ome = json.load(open(os.path.join(source, "zarr.json"))).get("attributes", {}).get("ome")
                if ome:
                    comment = json.loads(z.comment.rstrip(b"\0"))
                    check(comment == {"ome": {"version": ome["version"]}} and z.comment.endswith(b"\0"),
                          f"{name}: the RFC-9 comment {z.comment!r}")
                else:
                    check(z.comment == b"", f"{name}: no RFC-9 comment for a root that is no OME-Zarr image")
        check_http(binary, work, check)
        check_http(binary, work, check, ranges=False)
    finally:
        detach_beneath(work)
        shutil.rmtree(work, ignore_errors=True)
    return check.finish()


def check_http(binary, work, check, ranges=True):
    """A zarr-python ZipStore archive on a plain HTTP server, mounted by URL: ranged GETs, or
    (`python -m http.server`, which ignores Range) the archive read whole."""
    kind = "http" if ranges else "http without Range"
    served = os.path.join(work, "served" if ranges else "served-whole")
    os.makedirs(served)
    archive = os.path.join(served, "zarr-python.zip")
    shutil.copy(os.path.join(FIXTURES, "zip", "zarr-python.zip"), archive)
    # In a process of its own: a read of the mount that holds this process's GIL (numpy's
    # fromfile does) would keep a server thread here from answering the mount's requests.
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve" if ranges else "serve-whole", served],
                              stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    mnt = os.path.join(work, "mnt-http" if ranges else "mnt-http-whole")
    try:
        url = f"http://127.0.0.1:{port}/zarr-python.zip"
        mount(binary, url, mnt)
        try:
            group = zarr.open_group(zarr.storage.ZipStore(archive, mode="r"), mode="r")
            for path, arr in arrays(group):
                data = np.fromfile(os.path.join(mnt, path, "data"), dtype=arr.dtype.newbyteorder("<"))
                check(np.array_equal(data.reshape(arr.shape), arr[...]), f"{kind}: {path} through the mount")
            stats = json.load(open(os.path.join(mnt, ".zarrfs", "stats")))
            fetched = stats["store_requests"]["bytes_fetched"]
            check(stats["store_requests"]["ranged_get"] > 0, f"{kind}: ranged reads ({stats['store_requests']})")
            print(f"check-archives: {kind}: {fetched} bytes fetched of a {os.path.getsize(archive)}-byte archive")
        finally:
            unmount(binary, mnt)
        if not ranges:
            # Larger than a mount reads whole: refused, naming the limit and what the server lacks.
            out = subprocess.run([binary, "mount", url, mnt, "-o", "max_chunk_size=1K"], capture_output=True, text=True)
            said = out.stderr + out.stdout
            if out.returncode == 0:
                said += open(os.path.join(mnt, "error")).read() if os.path.exists(os.path.join(mnt, "error")) else ""
                unmount(binary, mnt)
            check("ignores Range requests" in said and "max-chunk-size" in said, f"{kind}: a large archive is refused: {said[:300]}")
    finally:
        server.kill()
        server.wait()


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that closed its connection early: not the check's business


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Python's file server, with the Range requests it lacks and no log lines."""

    def log_message(self, fmt, *args):
        if os.environ.get("LOG"):
            sys.stderr.write((fmt % args) + " " + str(self.headers.get("Range")) + "\n")

    def end_headers(self):
        # An ETag on every answer, as a web server gives one: a version of the archive.
        path = self.translate_path(self.path)
        if os.path.isfile(path):
            self.send_header("ETag", f'"{os.stat(path).st_mtime_ns}-{os.path.getsize(path)}"')
        super().end_headers()

    def send_head(self):
        spec = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not spec or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        first, _, last = spec.removeprefix("bytes=").partition("-")
        if first == "":
            start, end = max(size - int(last), 0), size - 1
        else:
            start, end = int(first), min(int(last) if last else size - 1, size - 1)
        if start >= size:
            self.send_error(416)
            return None
        f = open(path, "rb")
        f.seek(start)
        body = f.read(end - start + 1)
        f.close()
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


class WholeHandler(http.server.SimpleHTTPRequestHandler):
    """`python -m http.server` as it is: no Range requests, no ETag."""

    def log_message(self, fmt, *args):
        pass


def serve(directory, handler=QuietHandler):
    """Serve `directory` on a free port of 127.0.0.1, said on the first line of stdout."""
    server = QuietServer(("127.0.0.1", 0), functools.partial(handler, directory=directory))
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    if sys.argv[1:2] == ["serve-whole"]:
        serve(sys.argv[2], WholeHandler)
    sys.exit(main())
