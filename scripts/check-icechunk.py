#!/usr/bin/env python3
"""Icechunk repositories both ways with Python icechunk 2.3 and zarr-python: a repository Python
wrote reads through a mount with the values zarr-python reads; what a branch mount commits
(writes, growth, a new array made through the mount) reads back in Python with the values of a
numpy model, and the commit log names it; two mounts of one branch (two daemons, as two hosts)
writing different arrays both land, different bytes of one chunk are merged and both land, two
edits of one document fail the second (EBUSY) without wedging its mount; four mounts writing
20 fsynced rounds on shared or disjoint chunks lose nothing and are never refused; each snapshot reads as it was under .zarrfs/snapshots; a
virtual chunk reference (a file outside the repository) is refused unless the mount is given
--virtual-chunks, and then reads as Python reads it. Run under `scripts/with-store s3` it does the same on the
S3 server too (AWS_ENDPOINT_URL).

    scripts/check-icechunk.py target/release/zarrfs
"""
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import icechunk
import numpy as np
import zarr
from zarr.codecs import GzipCodec, ZstdCodec

from checks import Checks, detach_beneath, unmount

RNG = np.random.default_rng(20261204)


def storage(where):
    """A fresh repository's storage and its mount source: a local directory, or a prefix in the
    S3 server's bucket."""
    kind, place = where
    if kind == "local":
        return icechunk.local_filesystem_storage(place), place
    bucket = os.environ["ZARRFS_TEST_S3_BUCKET"]
    return icechunk.s3_storage(bucket=bucket, prefix=place, endpoint_url=os.environ["AWS_ENDPOINT_URL"], allow_http=True,
                               force_path_style=True, region="us-east-1", access_key_id="test",
                               secret_access_key="test"), f"s3://{bucket}/{place}"


def mount(binary, source, mnt, *extra):
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([binary, "mount", f"{source}|icechunk:", mnt, *extra], check=True, stderr=subprocess.DEVNULL)


def python_repo(check, binary, work, where):
    """Python writes; the mount reads."""
    st, source = storage(where)
    repo = icechunk.Repository.create(st)
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", attributes={"title": "by Python"})
    want = {
        "i16": np.arange(300, dtype="<i2").reshape(20, 15),
        "f64/gz": RNG.standard_normal((9, 31)),
        "u8/sharded": RNG.integers(0, 255, (64, 64), dtype="u1"),
        "big": RNG.integers(0, 1 << 30, (40, 200), dtype="<u4"),
    }
    root.create_array("i16", shape=(20, 15), chunks=(7, 4), dtype="<i2", fill_value=5)[...] = want["i16"]
    root.create_group("f64").create_array("gz", shape=(9, 31), chunks=(4, 8), dtype="<f8", compressors=GzipCodec(),
                                          fill_value=np.nan)[...] = want["f64/gz"]
    root.create_group("u8").create_array("sharded", shape=(64, 64), chunks=(8, 8), shards=(32, 64), dtype="u1",
                                         compressors=ZstdCodec(), fill_value=0)[...] = want["u8/sharded"]
    root.create_array("big", shape=(40, 200), chunks=(10, 200), dtype="<u4", fill_value=0)[...] = want["big"]
    session.commit("python")
    mnt = os.path.join(work, f"mnt-read-{where[0]}")
    mount(binary, source, mnt, "--read-only")
    try:
        for path, values in want.items():
            with open(os.path.join(mnt, path, "data"), "rb") as f:
                check(f.read() == values.tobytes(), f"{where[0]}: {path} reads as Python wrote it")
        with open(os.path.join(mnt, "zarr.json")) as f:
            check('"by Python"' in f.read(), f"{where[0]}: the root's attributes")
    finally:
        unmount(binary, mnt)
    return repo, source, want


def mount_writes(check, binary, work, where, repo, source, want):
    """The mount writes; Python reads what it committed."""
    mnt = os.path.join(work, f"mnt-write-{where[0]}")
    mount(binary, source, mnt)
    model = {k: v.copy() for k, v in want.items()}
    try:
        rows = np.arange(45, dtype="<i2").reshape(3, 15) + 1000
        with open(os.path.join(mnt, "i16", "data"), "ab") as f:  # growth past the last chunk
            f.write(rows.tobytes())
            f.flush()
            os.fsync(f.fileno())
        model["i16"] = np.concatenate([model["i16"], rows])
        fd = os.open(os.path.join(mnt, "u8", "sharded", "data"), os.O_WRONLY)
        try:
            os.pwrite(fd, bytes(range(100)), 64 * 10 + 3)
        finally:
            os.close(fd)
        model["u8/sharded"].reshape(-1)[64 * 10 + 3:64 * 10 + 103] = np.arange(100, dtype="u1")
        # A new array: zarr-python writes its document through the mount, the values go
        # through its data file (the mount shows arrays as files, not chunk keys).
        zarr.open_group(mnt, mode="r+").create_array("made", shape=(5, 6), chunks=(2, 6), dtype="<f4", fill_value=0)
        model["made"] = np.arange(30, dtype="<f4").reshape(5, 6)
        with open(os.path.join(mnt, "made", "data"), "r+b") as f:
            f.write(model["made"].tobytes())
    finally:
        unmount(binary, mnt)
    got = zarr.open_group(repo.readonly_session("main").store, mode="r")
    for path, values in model.items():
        arr = got[path]
        check(arr.shape == values.shape, f"{where[0]}: {path} shape {arr.shape} after the mount's commits")
        check(np.array_equal(arr[...], values, equal_nan=True), f"{where[0]}: {path} values after the mount's commits")
    messages = [s.message for s in repo.ancestry(branch="main")]
    check(any(m.startswith("zarrfs: i16") for m in messages), f"{where[0]}: the commit log names i16: {messages}")
    check(any("made" in m for m in messages), f"{where[0]}: the commit log names the new array: {messages}")
    check(messages[-1] == "Repository initialized" and "python" in messages, f"{where[0]}: Python's commits stay: {messages}")
    # The history as directories: the same snapshots in the same order, each as it was.
    mnt = os.path.join(work, f"mnt-history-{where[0]}")
    mount(binary, source, mnt, "--read-only")
    try:
        history = list(repo.ancestry(branch="main"))
        shown = os.listdir(os.path.join(mnt, ".zarrfs", "snapshots"))
        check(shown == [s.id for s in history], f"{where[0]}: .zarrfs/snapshots lists the history, newest first: {shown}")
        python = next(s.id for s in history if s.message == "python")
        with open(os.path.join(mnt, ".zarrfs", "snapshots", python, "i16", "data"), "rb") as f:
            check(f.read() == want["i16"].tobytes(), f"{where[0]}: i16 in Python's snapshot reads as Python wrote it")
        check(not os.path.exists(os.path.join(mnt, ".zarrfs", "snapshots", python, "made")), f"{where[0]}: made came later")
    finally:
        unmount(binary, mnt)


def errno_of(step):
    """The errno `step` fails with, or None."""
    try:
        step()
        return None
    except OSError as e:
        return e.errno


def two_writers(check, binary, work, where):
    """Two daemons on one branch: different arrays both land; the same chunk fails the second."""
    st, source = storage((where[0], where[1] + "-two"))
    repo = icechunk.Repository.create(st)
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w")
    for name in ("a", "b"):
        root.create_array(name, shape=(8, 8), chunks=(4, 4), dtype="u1", fill_value=0)[...] = 1
    session.commit("two arrays")
    m1, m2 = os.path.join(work, f"mnt-one-{where[0]}"), os.path.join(work, f"mnt-two-{where[0]}")
    mount(binary, source, m1, "-o", "metadata_ttl=1")
    mount(binary, source, m2, "-o", "metadata_ttl=1")
    try:
        # Both open before either commits: each session starts at the same snapshot.
        f1 = os.open(os.path.join(m1, "a", "data"), os.O_WRONLY)
        f2 = os.open(os.path.join(m2, "b", "data"), os.O_WRONLY)
        with open(os.path.join(m1, "b", "data"), "rb") as f:  # cached: the first mount's pages
            check(f.read(8) == b"\x01" * 8, f"{where[0]}: b as Python wrote it")
        os.pwrite(f1, b"\x0a" * 8, 0)
        os.pwrite(f2, b"\x0b" * 8, 0)
        os.fsync(f1)
        os.fsync(f2)  # rebased over the first: disjoint
        # Each follows the branch: after the TTL, an open reads what the other committed (the
        # first moved to the tip; the second's commit was rebased onto the first's).
        time.sleep(1.5)
        with open(os.path.join(m1, "b", "data"), "rb") as f:
            got = f.read(8)
            check(got == b"\x0b" * 8, f"{where[0]}: the first mount follows the branch to the second's commit: {got!r}")
        with open(os.path.join(m2, "a", "data"), "rb") as f:
            got = f.read(8)
            check(got == b"\x0a" * 8, f"{where[0]}: the second mount reads the first's commit under its rebased one: {got!r}")
        # Different bytes of one chunk of a, which neither had written since: the second
        # commit is rebased over the first with the chunk merged, both kept.
        g2 = os.open(os.path.join(m2, "a", "data"), os.O_WRONLY)
        os.pwrite(f1, b"\x0c" * 2, 8 * 4 + 4)
        os.pwrite(g2, b"\x0d" * 2, 8 * 4 + 6)
        os.fsync(f1)
        failed = errno_of(lambda: os.fsync(g2))
        check(failed is None, f"{where[0]}: a commit of other bytes of the same chunk is merged, not refused (got {failed})")
        # Both edit b's attributes (one document): the second commit cannot be merged and fails
        # with EBUSY; the mount goes on from the tip, and its next write commits.
        def set_title(mnt, title):
            path = os.path.join(mnt, "b", "zarr.json")
            with open(path) as f:
                doc = json.load(f)
            doc.setdefault("attributes", {})["title"] = title
            with open(path, "w") as f:
                json.dump(doc, f)
        set_title(m1, "one")
        failed = errno_of(lambda: set_title(m2, "two"))
        check(failed == errno.EBUSY, f"{where[0]}: a second edit of one document fails with EBUSY (got {failed})")
        os.pwrite(g2, b"\x0e" * 2, 8 * 7)
        failed = errno_of(lambda: os.fsync(g2))
        check(failed is None, f"{where[0]}: after a refused commit the mount commits again (got {failed})")
        for fd in (f1, f2, g2):
            try:
                os.close(fd)
            except OSError:
                pass
    finally:
        unmount(binary, m1)
        done = subprocess.run([binary, "unmount", m2], stderr=subprocess.PIPE, text=True)
        check(done.returncode == 0, f"{where[0]}: the second mount unmounts cleanly: {done.returncode} {done.stderr.strip()}")
        subprocess.run([binary, "unmount", "--lazy", m2], check=False, stderr=subprocess.DEVNULL)
    got = zarr.open_group(repo.readonly_session("main").store, mode="r")
    a, b = got["a"][...], got["b"][...]
    check(bytes(a[0]) == b"\x0a" * 8, f"{where[0]}: the first writer's row landed: {a[0]}")
    check(bytes(b[0]) == b"\x0b" * 8, f"{where[0]}: the second writer's disjoint row landed: {b[0]}")
    check(bytes(a[4, 4:]) == b"\x0c" * 2 + b"\x0d" * 2, f"{where[0]}: the same chunk holds both commits' bytes: {a[4]}")
    check(bytes(a[7, :2]) == b"\x0e" * 2, f"{where[0]}: the commit after the refused one landed: {a[7]}")
    titles = got["b"].attrs.get("title")
    check(titles == "one", f"{where[0]}: the first edit of the document stands: {titles}")


def many_writers(check, binary, work, where):
    """Four daemons on one branch, 20 fsynced rounds each: spans that share edge chunks, then
    spans in chunks of their own. Every writer's last round is on the branch; no fsync fails."""
    for layout, step in (("shared edge chunks", 1024), ("disjoint chunks", 1100)):
        st, source = storage((where[0], where[1] + f"-many-{step}"))
        repo = icechunk.Repository.create(st)
        session = repo.writable_session("main")
        root = zarr.open_group(session.store, mode="w")
        root.create_array("a", shape=(4400,), chunks=(100,), dtype="u1", fill_value=0, compressors=ZstdCodec(level=1))
        session.commit("an array")
        mounts = [os.path.join(work, f"mnt-many-{where[0]}-{step}-{w}") for w in range(4)]
        for m in mounts:
            mount(binary, source, m, "-o", "metadata_ttl=1")
        failures = []
        try:
            def write(w):
                fd = os.open(os.path.join(mounts[w], "a", "data"), os.O_WRONLY)
                try:
                    for rnd in range(1, 21):
                        span = bytes(((w * 64) ^ rnd ^ (i % 251)) & 0xFF for i in range(1024))
                        os.pwrite(fd, span, w * step)
                        try:
                            os.fsync(fd)
                        except OSError as e:
                            failures.append((w, rnd, e.errno))
                finally:
                    os.close(fd)
            threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            for m in mounts:
                unmount(binary, m)
        got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[...]
        want = np.zeros(4400, dtype="u1")
        for w in range(4):
            want[w * step:w * step + 1024] = [((w * 64) ^ 20 ^ (i % 251)) & 0xFF for i in range(1024)]
        lost = int((got != want).sum())
        print(f"icechunk ({where[0]}), 4 writers, {layout}: {lost} bytes lost, {len(failures)} fsyncs refused")
        check(not failures, f"{where[0]}: 4 writers on {layout}: no fsync refused: {failures[:5]}")
        check(lost == 0, f"{where[0]}: 4 writers on {layout}: {lost} bytes lost")


def virtual_chunks(check, binary, work):
    """A reference to a file outside the repository is followed only when asked for."""
    outside = os.path.join(work, "outside")
    os.makedirs(outside)
    with open(os.path.join(outside, "chunk.bin"), "wb") as f:
        f.write(b"ABCD")
    prefix = f"file://{outside}/"
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(outside)))
    path = os.path.join(work, "virtual-repo")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(path), config, authorize_virtual_chunk_access={prefix: None})
    session = repo.writable_session("main")
    zarr.create_array(session.store, name="v", shape=(8,), chunks=(4,), dtype="u1", fill_value=0, compressors=None)
    session.store.set_virtual_ref("v/c/0", f"{prefix}chunk.bin", offset=0, length=4)
    session.commit("virtual")
    log = os.path.join(work, "virtual.log")
    # --targets follows only the containers beneath its prefixes, as a reference set's targets.
    for extra, want in (((), None), (("--virtual-chunks",), b"ABCD" + bytes(4)), (("--targets", outside), b"ABCD" + bytes(4)),
                        (("--targets", os.path.join(work, "elsewhere")), None)):
        mnt = os.path.join(work, f"mnt-virtual{len(extra)}-{abs(hash(extra))}")
        mount(binary, path, mnt, "--read-only", "--log-file", log, *extra)
        try:
            try:
                with open(os.path.join(mnt, "v", "data"), "rb") as f:
                    got = f.read()
            except OSError as e:
                got = e.errno
            if want is None:
                check(got == errno.EIO, f"a virtual chunk is not followed unless asked for (got {got!r})")
                with open(log) as f:
                    check("--virtual-chunks" in f.read(), "the log says how to follow it")
            else:
                check(got == want, f"with --virtual-chunks the virtual chunk reads ({got!r})")
        finally:
            unmount(binary, mnt)


def virtualizarr_repository(check, binary, work):
    """A repository VirtualiZarr wrote from a netCDF4 file (chunked with shuffle + zlib, with
    fletcher32, contiguous) reads through --virtual-chunks as netCDF4 reads the file."""
    import netCDF4
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_dataset
    from virtualizarr.parsers import HDFParser
    from virtualizarr.registry import ObjectStoreRegistry
    files = os.path.join(work, "netcdf")
    os.makedirs(files)
    source = os.path.join(files, "day0.nc")
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "kerchunk", "day0.nc"), source)
    prefix = f"file://{files}/"
    vds = open_virtual_dataset(f"file://{source}", registry=ObjectStoreRegistry({prefix: LocalStore(files)}), parser=HDFParser())
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(files)))
    path = os.path.join(work, "virtualizarr-repo")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(path), config, authorize_virtual_chunk_access={prefix: None})
    session = repo.writable_session("main")
    vds.vz.to_icechunk(session.store)
    session.commit("virtualizarr")
    mnt = os.path.join(work, "mnt-virtualizarr")
    mount(binary, path, mnt, "--read-only", "--virtual-chunks")
    try:
        with netCDF4.Dataset(source) as ds:
            for var in ["air", "q", "mask", "time"]:
                want = np.ascontiguousarray(np.ma.getdata(ds[var][...]))
                want = want.astype(want.dtype.newbyteorder("<")).tobytes()
                with open(os.path.join(mnt, var, "data"), "rb") as f:
                    check(f.read() == want, f"VirtualiZarr's {var} reads as netCDF4 reads the file")
    finally:
        unmount(binary, mnt)


def main():
    binary = os.path.abspath(sys.argv[1])
    check = Checks("check-icechunk")
    work = tempfile.mkdtemp()
    places = [("local", os.path.join(work, "repo"))]
    if os.environ.get("AWS_ENDPOINT_URL") and os.environ.get("ZARRFS_TEST_S3_BUCKET"):
        places.append(("s3", f"icechunk-{uuid.uuid4().hex[:8]}"))
    try:
        for where in places:
            repo, source, want = python_repo(check, binary, work, where)
            mount_writes(check, binary, work, where, repo, source, want)
            two_writers(check, binary, work, where)
            many_writers(check, binary, work, where)
        virtual_chunks(check, binary, work)
        virtualizarr_repository(check, binary, work)
    finally:
        detach_beneath(work)
        shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
