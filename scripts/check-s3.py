#!/usr/bin/env python3
"""Object-store checks against a real S3-compatible server on loopback (moto, started by
scripts/test; its endpoint in AWS_ENDPOINT_URL, bucket in ZARRFS_TEST_S3_BUCKET):

- interop: arrays written to the bucket by zarr-python (obstore) and tensorstore (s3 kvstore)
  read through a mount; what the mount writes, grows and prepends read back by both;
- requests, counted by a proxy in front of the server: one ranged GET per inner chunk for a
  sharded point read (after the shard index), one GET per shard for a read of whole shards,
  none for cached chunks, exactly the new chunk PUTs and one metadata PUT for a prepend, none
  for an open or partial writes, and for an fsync the chunks' GETs and PUTs, one HEAD of the
  array's document and (the first time) one listing of the array, after which the chunks of an
  array that held none are PUT without a GET;
- faults: 503s and dropped connections within the retry budget change nothing a reader or
  writer sees; past it, EIO, and no metadata PUT after a failed chunk PUT;
- conditional PUTs: metadata another writer changed under the mount is not overwritten;
- mount-time errors: a missing bucket, refused credentials and an unreachable endpoint are
  refused by the parent in one line;
- credentials from a profile of the shared credentials file (AWS_PROFILE), from EC2 instance
  metadata, from EKS pod identity and from web identity (stand-in services on loopback, STS over
  HTTPS with a test CA), against a server that checks signatures (rclone serve s3); anonymous
  access to a public bucket (`--no-sign-request`, AWS_SKIP_SIGNATURE, `s3a://`) signing nothing;
  virtual-hosted addressing (a private mount namespace names the bucket's host); the fstab form
  `mount -t fuse.zarrfs s3://... -o endpoint=`;
- walks: a `find` over a plate is one listing and one GET a document, a second within the TTL
  none; new nodes show (the mount's at once, another writer's after the TTL); a bucket that
  refuses listings still serves each node; with --trust-consolidated, a walk asks for nothing
  but the root's consolidated metadata (once per metadata TTL), and a node changed without
  consolidating shows as consolidated;
- plain HTTP: a consolidated store served over http:// mounts read-only, and over https://
  (a TLS front with a test CA's certificate) too.

    scripts/check-s3.py target/release/zarrfs
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

import numcodecs
import numpy as np
import obstore.store
import tensorstore as ts
import zarr
from zarr.storage import ObjectStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3proxy import DelayProxy, S3Proxy  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
EP = os.environ["AWS_ENDPOINT_URL"]
BUCKET = os.environ.get("ZARRFS_TEST_S3_BUCKET", "zarrfs-test")
REGION = os.environ.get("AWS_REGION", "us-east-1")
RESULTS = {"passed": 0, "failed": 0}


def check(cond, what):
    RESULTS["passed" if cond else "failed"] += 1
    if not cond:
        print(f"FAIL: {what}", flush=True)


def s3store(prefix, endpoint=EP):
    s = obstore.store.S3Store(BUCKET, prefix=prefix, endpoint=endpoint, access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                              secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], region=REGION,
                              client_options={"allow_http": True})
    return ObjectStore(s)


def ts_spec(prefix, driver="zarr3"):
    return {"driver": driver, "kvstore": {"driver": "s3", "bucket": BUCKET, "path": prefix.rstrip("/") + "/", "endpoint": EP,
                                          "aws_region": REGION}}


class Mount:
    def __init__(self, source, *extra, endpoint=EP, env=None):
        self.dir = tempfile.mkdtemp(prefix="zarrfs-s3-")
        self.log = self.dir + ".log"
        env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, **(env or {}))
        self.proc = subprocess.Popen([BIN, "mount", "-f", source, self.dir, *extra], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "w"), env=env)
        deadline = time.time() + 30
        while not os.path.ismount(self.dir):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"mount failed: {open(self.log).read()}")
            time.sleep(0.02)

    def path(self, rel):
        return os.path.join(self.dir, rel)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        if os.path.ismount(self.dir):
            subprocess.run(["umount", "-l", self.dir])

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def le_bytes(a):
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def interop():
    prefix = f"interop-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(5)
    g = zarr.open_group(s3store(prefix), mode="w")
    arrays = {
        "zstd": (rng.standard_normal((37, 29)) * 100).astype("f4"),
        "sharded": rng.integers(-999, 999, (40, 30), dtype="i4"),
        "gzip_u2": rng.integers(0, 60000, (25, 11), dtype="u2"),
    }
    g.create_array("zstd", data=arrays["zstd"], chunks=(8, 7), compressors=zarr.codecs.ZstdCodec(level=3))
    g.create_array("sharded", data=arrays["sharded"], chunks=(5, 5), shards=(10, 15))
    g.create_array("gzip_u2", data=arrays["gzip_u2"], chunks=(6, 11), compressors=zarr.codecs.GzipCodec())
    v2 = zarr.open_group(s3store(prefix + "/v2"), mode="w", zarr_format=2)
    arrays["v2/blosc"] = rng.integers(0, 2**40, (19, 7), dtype="i8")
    v2.create_array("blosc", data=arrays["v2/blosc"], chunks=(4, 7), compressors=numcodecs.Blosc(cname="lz4"))
    t = ts.open(ts_spec(prefix + "/ts"), create=True, dtype="int16", shape=[23, 9],
                chunk_layout=ts.ChunkLayout(chunk_shape=[4, 9]),
                codec=ts.CodecSpec({"driver": "zarr3", "codecs": [{"name": "bytes"}, {"name": "zstd"}]})).result()
    arrays["ts"] = rng.integers(-30000, 30000, (23, 9), dtype="i2")
    t[...] = arrays["ts"]
    # The mount's root is the group (tensorstore writes no group document: read ts/ directly).
    with Mount(f"s3://{BUCKET}/{prefix}") as m:
        for name, want in arrays.items():
            got = open(m.path(f"{name}/data"), "rb").read()
            check(got == le_bytes(want), f"interop read {name}")
        # Writes, growth and a prepend through the mount.
        with open(m.path("zstd/data"), "r+b") as f:
            f.seek(3 * 29 * 4)
            f.write(np.full(29, 7.5, "f4").tobytes())
        arrays["zstd"][3] = 7.5
        with open(m.path("gzip_u2/data"), "r+b") as f:
            f.truncate(30 * 11 * 2)
        arrays["gzip_u2"] = np.concatenate([arrays["gzip_u2"], np.zeros((5, 11), "u2")])
        with open(m.path("ts/data"), "r+b") as f:
            f.seek(22 * 9 * 2)
            f.write(np.arange(9, dtype="i2").tobytes())
        arrays["ts"][22] = np.arange(9)
    back = zarr.open_group(s3store(prefix), mode="r")
    for name in ["zstd", "gzip_u2"]:
        check(np.array_equal(back[name][...], arrays[name]), f"zarr-python reads back {name}")
        check(np.array_equal(ts.open(ts_spec(f"{prefix}/{name}")).result().read().result(), arrays[name]),
              f"tensorstore reads back {name}")
    check(np.array_equal(ts.open(ts_spec(prefix + "/ts")).result().read().result(), arrays["ts"]), "tensorstore reads back ts")
    # A prepend onto an offset-encoded array (adopted at open): zarr-python cannot read the
    # offset encoding, so the mount's own remount and the stored keys are what is checked.
    with Mount(f"s3://{BUCKET}/{prefix}", "-o", "adopt_offset") as m:
        new = rng.integers(-999, 999, (10, 30), dtype="i4")
        with open(m.path("sharded/prepend"), "wb") as f:
            f.write(le_bytes(new))
        arrays["sharded"] = np.concatenate([new, arrays["sharded"]])
    with Mount(f"s3://{BUCKET}/{prefix}", "--read-only") as m:
        check(open(m.path("sharded/data"), "rb").read() == le_bytes(arrays["sharded"]), "prepend read back after a remount")


def small_chunks_at_once(proxy):
    """Where every request is a round trip, a read of many small chunks asks for them many at
    once, not one after another: 200 chunks of 1 KiB, each GET held 20 ms by the proxy."""
    prefix = f"small-{uuid.uuid4().hex[:8]}"
    want = (np.arange(200 * 256, dtype="<u4") % 1009).reshape(200 * 4, 64)
    zarr.create_array(s3store(prefix), data=want, chunks=(4, 64), compressors=None)
    with Mount(f"s3://{BUCKET}/{prefix}", "--read-only", endpoint=proxy.url) as m:
        os.stat(m.path("data"))
        time.sleep(0.5)  # the root's listing, started by the lookup, is over
        proxy.reset()
        proxy.delay = 0.02
        try:
            got = open(m.path("data"), "rb").read()
        finally:
            proxy.delay = 0.0
        gets = [e for e in proxy.entries() if e[0] == "GET" and "/c/" in e[1]]
        check(got == want.tobytes(), "an array of small chunks reads back whole")
        check(len(gets) == 200 and proxy.most_in_flight >= 8,
              f"small chunks are asked for many at once ({len(gets)} GETs, at most {proxy.most_in_flight} under way)")
        print(f"small chunks: {len(gets)} GETs, at most {proxy.most_in_flight} under way", flush=True)


def requests_counted(proxy):
    prefix = f"count-{uuid.uuid4().hex[:8]}"
    g = zarr.open_group(s3store(prefix), mode="w")
    g.create_array("sh", data=np.arange(64 * 64, dtype="u2").reshape(64, 64), chunks=(8, 8), shards=(32, 32))
    g.create_array("plain", data=np.arange(40 * 6, dtype="i4").reshape(40, 6), chunks=(4, 6))
    g.create_array("rw", data=np.arange(32 * 8, dtype="<u4").reshape(32, 8), chunks=(4, 8))
    g.create_array("new", shape=(32, 8), dtype="<u4", chunks=(4, 8), fill_value=0)
    # Sparse: one chunk of 16 stored; each 1 MiB read touches half of a chunk row (2 MiB).
    sparse = g.create_array("sparse", shape=(1024, 1024), chunks=(512, 128), dtype="f4", fill_value=-1.0)
    sparse[512:, 256:384] = 7.0
    adopt = subprocess.run([BIN, "adopt", f"s3://{BUCKET}/{prefix}", "plain"], capture_output=True, text=True)
    check(adopt.returncode == 0, f"zarrfs adopt on a bucket: {adopt.stderr}")
    # A lookup lists its siblings in the background: each count starts once that is done.
    def reset():
        proxy.settle()
        proxy.reset()

    with Mount(f"s3://{BUCKET}/{prefix}", endpoint=proxy.url) as m:
        data = m.path("sh/data")
        os.stat(data)
        # O_DIRECT: the kernel asks for exactly the bytes read, not a page and its read-ahead.
        fd = os.open(data, os.O_RDONLY | os.O_DIRECT)
        reset()
        got = os.pread(fd, 2, (40 * 64 + 41) * 2)  # element (40, 41): shard (1, 1), inner chunk (5, 5)
        gets = [e for e in proxy.entries() if e[0] == "GET"]
        check(int.from_bytes(got, "little") == 40 * 64 + 41, "sharded point read value")
        check(len(gets) == 2 and all(e[2] for e in gets), f"sharded point read: the index and one inner chunk, ranged ({gets})")
        reset()
        os.pread(fd, 2, (40 * 64 + 41) * 2)
        check(not [e for e in proxy.entries() if e[0] == "GET"], f"a cached chunk is not fetched again ({proxy.entries()})")
        os.close(fd)
        # A read of all of it: shards (0, 0) and (0, 1) in the first 4 KiB, each read whole in
        # one GET, its index with it; shard (1, 1), whose index is cached, in ranges (its inner
        # chunks are stored in order: one range); shard (1, 0) whole. Never a request per inner chunk.
        reset()
        check(open(data, "rb").read() == np.arange(64 * 64, dtype="<u2").tobytes(), "sharded array reads back whole")
        shard_gets = [e for e in proxy.entries() if e[0] in ("GET", "HEAD") and "/sh/c/" in e[1]]
        whole_gets = sorted(e[1].rsplit("/sh/", 1)[1] for e in shard_gets if not e[2])
        check(whole_gets == ["c/0/0", "c/0/1", "c/1/0"] and len(shard_gets) == 4,
              f"a whole read of 4 shards of 16 inner chunks: three shards whole, the fourth's inner chunks in one range ({shard_gets})")
        # A missing chunk is asked for once, however many reads touch it.
        reset()
        want = np.full((1024, 1024), -1.0, dtype="<f4")
        want[512:, 256:384] = 7.0
        check(open(m.path("sparse/data"), "rb").read() == want.tobytes(), "a sparse array reads back")
        asked = {}
        for e in proxy.entries():
            if e[0] in ("GET", "HEAD") and "/sparse/c/" in e[1]:
                asked[e[1]] = asked.get(e[1], 0) + 1
        check(len(asked) <= 16 and all(n == 1 for n in asked.values()), f"each chunk of a sparse array is asked for once ({asked})")
        os.stat(m.path("plain/data"))
        reset()
        with open(m.path("plain/prepend"), "wb") as f:
            f.write(np.arange(8 * 6, dtype="i4").tobytes())  # two chunk rows
        # The mount's one probe of conditional deletes (its first need of one: the lease's
        # release) is an object of its own, PUT, deleted over a wrong ETag (412), deleted.
        entries = proxy.entries()
        probe = [e for e in entries if ".zarrfs-delete-probe-" in e[1]]
        entries = [e for e in entries if ".zarrfs-delete-probe-" not in e[1] and e[0] != "POST"]
        check(len(probe) <= 2 and all(e[0] != "DELETE" or e[3] == 412 for e in probe),
              f"conditional deletes are probed once, with an object of the mount's own ({probe})")
        puts = [e[1] for e in entries if e[0] == "PUT"]
        chunk_puts = [p for p in puts if "/c/" in p]
        meta_puts = [p for p in puts if p.endswith("zarr.json")]
        # The array's shape lock: a lease PUT beside the document, PUT again to confirm it just
        # before the metadata, and deleted over its version when done: no other copy or delete.
        lease_puts = [p for p in puts if p.endswith("/.zarr.json.zarrfs-lock.tmp")]
        deletes = [e for e in entries if e[0] == "DELETE"]
        copies = [e for e in entries if e[0] == "PUT" and e[2]]
        check(len(chunk_puts) == 2 and len(meta_puts) == 1 and len(lease_puts) == 2 and len(puts) == 5 and len(deletes) == 1
              and deletes[0][1].endswith("/.zarr.json.zarrfs-lock.tmp") and not copies,
              f"a prepend is its new chunk PUTs, one metadata PUT, its lease's PUT, confirmation and delete ({puts}; {deletes})")
        # Conditional chunk writes cost no round trip of their own: a chunk changed in part is
        # read (its ETag kept) and stored over that ETag; one written whole is stored over
        # anything. Neither asks for a chunk's version (HEAD).
        chunk_requests = lambda: [(e[0], e[1]) for e in proxy.entries() if "/rw/c/" in e[1]]
        os.stat(m.path("rw/data"))
        reset()
        fd = os.open(m.path("rw/data"), os.O_WRONLY)
        opened = proxy.entries()
        check(not opened, f"opening data of an array already looked up asks the store nothing ({opened})")
        for row in range(0, 32, 4):
            os.pwrite(fd, (1000 + row).to_bytes(4, "little"), row * 8 * 4)
        written = proxy.entries()
        check(not written, f"writes into part of 8 chunks ask the store nothing until they are stored ({written})")
        os.fsync(fd)
        synced = [(e[0], e[1]) for e in proxy.entries()]
        os.close(fd)
        partial = chunk_requests()
        kinds = lambda reqs: {k: sum(1 for r in reqs if r[0] == k) for k in ("GET", "HEAD", "PUT")}
        check(kinds(partial) == {"GET": 8, "HEAD": 0, "PUT": 8}, f"8 chunks changed in part: a GET and a conditional PUT each, no HEAD ({partial})")
        # The shape did not change: the fsync stores chunks, after one HEAD of the document (no
        # other writer changed the array's metadata since it was read: docs/consistency.md) and
        # one listing of the array (whether it holds any chunk: this mount read none of it),
        # and asks nothing else (no HEAD of a chunk, no document read or written).
        others = sorted(r for r in synced if "/rw/c/" not in r[1])
        check(sorted(synced) == sorted(partial + others) and others == [("GET", f"/{BUCKET}"), ("HEAD", f"/{BUCKET}/{prefix}/rw/zarr.json")],
              f"an fsync of 8 chunks changed in part is their 16 requests, a listing and a HEAD of the document ({synced})")
        # The same into an array that holds no chunk: the listing says so, and each chunk is
        # created (a conditional PUT) without a GET.
        # That listing goes out beside the HEAD, not after it: one round trip less before the
        # chunks go (the HEAD is held until the listing has come or 10 s have passed).
        os.stat(m.path("new/data"))
        reset()
        fd = os.open(m.path("new/data"), os.O_WRONLY)
        for row in range(0, 32, 4):
            os.pwrite(fd, (1000 + row).to_bytes(4, "little"), row * 8 * 4)
        entered, release = proxy.hold("HEAD", f"/{BUCKET}/{prefix}/new/zarr.json")
        sync = threading.Thread(target=os.fsync, args=(fd,))
        sync.start()
        listed = lambda: [e for e in proxy.entries() if e[0] == "GET" and e[1] == f"/{BUCKET}"]
        check(entered.wait(30), "the fsync's HEAD of the document arrived")
        waited = time.time() + 10
        while not listed() and time.time() < waited:
            time.sleep(0.02)
        beside = listed()
        release.set()
        sync.join(60)
        check(beside, f"the listing of an array that held no chunk goes out while the HEAD of its document is under way ({proxy.entries()})")
        os.close(fd)
        created = sorted((e[0], e[1]) for e in proxy.entries())
        new_chunks = [r for r in created if "/new/c/" in r[1]]
        check(kinds(new_chunks) == {"GET": 0, "HEAD": 0, "PUT": 8} and len(created) == 10,
              f"8 chunks of an array that held none, changed in part: a PUT each, a listing and a HEAD ({created})")
        want = np.zeros((32, 8), dtype="<u4")
        want[::4, 0] = 1000 + np.arange(0, 32, 4)
        check(np.array_equal(zarr.open_group(s3store(prefix), mode="r")["new"][...], want), "the new array reads back")
        reset()
        whole = np.arange(32 * 8, dtype="<u4") + 7
        with open(m.path("rw/data"), "r+b") as f:
            f.write(whole.tobytes())
        overwrite = chunk_requests()
        check(kinds(overwrite) == {"GET": 0, "HEAD": 0, "PUT": 8}, f"8 chunks written whole: a PUT each ({overwrite})")
        check(np.array_equal(zarr.open_group(s3store(prefix), mode="r")["rw"][...].ravel(), whole), "the rewritten array reads back")
        print(f"requests: sharded point read 2 ranged GETs; cached re-read 0; sparse scan {sum(asked.values())} for 16 chunks; prepend of 2 chunks {len(puts)} PUTs", flush=True)


def faults(proxy):
    prefix = f"faults-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(9)
    want = (rng.standard_normal((64, 48)) * 10).astype("f4")
    zarr.open_group(s3store(prefix), mode="w").create_array("a", data=want, chunks=(8, 16))
    proxy.fail_every, proxy.drop_every = 4, 7
    try:
        with Mount(f"s3://{BUCKET}/{prefix}", endpoint=proxy.url) as m:
            check(open(m.path("a/data"), "rb").read() == le_bytes(want), "reads through 503s and dropped connections")
            with open(m.path("a/data"), "r+b") as f:
                f.seek(10 * 48 * 4)
                f.write(np.full(48 * 3, 2.5, "f4").tobytes())
                os.fsync(f.fileno())
            want[10:13] = 2.5
        injected = [e for e in proxy.entries() if e[3] in (503, "dropped")]
        check(len(injected) > 3, f"faults were injected ({len(injected)})")
    finally:
        proxy.fail_every, proxy.drop_every = 0, 0
    check(np.array_equal(zarr.open_group(s3store(prefix), mode="r")["a"][...], want), "writes through faults read back")
    # Past the retry budget: EIO, and the metadata is not PUT after a failed chunk PUT.
    with Mount(f"s3://{BUCKET}/{prefix}", endpoint=proxy.url) as m:
        os.stat(m.path("a/data"))
        f = os.open(m.path("a/data"), os.O_RDWR)
        os.ftruncate(f, 70 * 48 * 4)  # growth: a metadata change
        os.pwrite(f, np.full(48, 9, "f4").tobytes(), 66 * 48 * 4)
        proxy.reset()
        proxy.fail_all = True
        t0 = time.time()
        try:
            os.fsync(f)
            failed = False
        except OSError as e:
            failed = e.errno == 5
        took = time.time() - t0
        proxy.fail_all = False
        check(failed, "fsync past the retry budget fails with EIO")
        puts = [e for e in proxy.entries() if e[0] == "PUT"]
        # (The flush asks first whether another writer changed the metadata: that request fails
        # too, and nothing is PUT at all.)
        check(not any(p[1].endswith("zarr.json") for p in puts), f"no metadata PUT after a failed request ({puts[:3]}...)")
        check(zarr.open_group(s3store(prefix), mode="r")["a"].shape == (64, 48), "the stored shape is still the old one")
        print(f"faults: fsync gave EIO after {took:.1f} s and {len(puts)} refused PUTs", flush=True)
        # Once the server answers again, the changes held are stored (at close or unmount).
        try:
            os.close(f)
        except OSError:
            pass
    want = np.concatenate([want, np.zeros((6, 48), "f4")])
    want[66] = 9
    check(np.array_equal(zarr.open_group(s3store(prefix), mode="r")["a"][...], want), "the held changes are stored once the server answers")


def recheck_during_a_flush(proxy, held):
    """The array grows twice, each change flushed. While the second flush's PUT of `held` (the
    new chunk, or the metadata, which goes last) is held back (a slow network), the metadata TTL
    runs out and a stat checks the bucket, which holds the document of the first: that is the
    mount's own change on its way, not another writer's. The stat answers at once, with the new
    size."""
    prefix = f"recheck-{uuid.uuid4().hex[:8]}"
    zarr.open_group(s3store(prefix), mode="w").create_array("a", data=np.ones((8, 4), "u1"), chunks=(4, 4))
    with Mount(f"s3://{BUCKET}/{prefix}", "--metadata-ttl", "0", endpoint=proxy.url) as m:
        data = m.path("a/data")
        f = os.open(data, os.O_RDWR)
        os.pwrite(f, bytes([2]) * 16, 8 * 4)  # rows 8-11, chunk (2, 0): 12 rows
        os.fsync(f)
        os.pwrite(f, bytes([3]) * 16, 12 * 4)  # rows 12-15, chunk (3, 0): 16 rows
        entered, release = proxy.hold("PUT", f"/{BUCKET}/{prefix}/a/{held}")
        flush = threading.Thread(target=os.fsync, args=(f,))
        flush.start()
        check(entered.wait(30), f"the flush's PUT of {held} arrived")
        time.sleep(1.2)  # past the kernel's entry and attribute timeouts (1 s): stat asks the mount
        seen = {}
        stat = threading.Thread(target=lambda: seen.update(size=os.stat(data).st_size))
        stat.start()
        stat.join(10)
        answered = not stat.is_alive()
        release.set()
        flush.join(60)
        stat.join(60)
        check(answered, f"a stat while the PUT of {held} is held answers at once")
        size = seen.get("size")
        check(size == 16 * 4, f"a metadata re-check during a flush keeps the size being stored ({size}, not {16 * 4})")
        check(os.stat(data).st_size == 16 * 4 and os.pread(f, 16, 12 * 4) == bytes([3]) * 16, "the rows written read back")
        os.close(f)
    check(zarr.open_group(s3store(prefix), mode="r")["a"].shape == (16, 4), "the new shape is stored")


def read_after_a_background_store(proxy):
    """A read of a chunk is slow (its GET held back); meanwhile the chunk is written whole and,
    a small dirty limit starting background stores, PUT. A read of the chunk that starts after
    that must get the new bytes, not join the slow read of the old ones."""
    prefix = f"joined-{uuid.uuid4().hex[:8]}"
    zarr.open_group(s3store(prefix), mode="w").create_array("a", data=np.ones((64, 4096), "u1"), chunks=(8, 4096))
    with Mount(f"s3://{BUCKET}/{prefix}", "-o", "dirty_limit=64K", endpoint=proxy.url) as m:
        data = m.path("a/data")
        os.stat(data)
        # O_DIRECT: each read and write reaches the mount as it is, with no page cache between.
        f = os.open(data, os.O_RDWR | os.O_DIRECT)
        key = f"/{BUCKET}/{prefix}/a/c/0/0"
        entered, release = proxy.hold("GET", key)
        slow = threading.Thread(target=os.pread, args=(f, 4096, 0))
        slow.start()
        check(entered.wait(30), "the slow read's GET arrived")
        os.pwrite(f, bytes([9]) * 8 * 4096, 0)  # chunk (0, 0), whole
        deadline = time.time() + 20
        while not any(e[0] == "PUT" and e[1] == key and e[3] == 200 for e in proxy.entries()) and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # the store's answer reaches the mount, which forgets the chunk held
        got = []
        later = threading.Thread(target=lambda: got.append(os.pread(f, 4096, 4096)))
        later.start()
        later.join(10)
        at_once = not later.is_alive()
        release.set()
        slow.join(60)
        later.join(60)
        check(at_once, "a read after a background store does not wait for a slow read of the old chunk")
        check(got == [bytes([9]) * 4096], f"a read after a background store gets the new bytes ({got[0][:4] if got else None})")
        os.close(f)
    check(zarr.open_group(s3store(prefix), mode="r")["a"][:8].tobytes() == bytes([9]) * 8 * 4096, "the chunk written is stored")


def close_fails(path, flags, text):
    """Write `text` to `path` opened with `flags`; whether the close failed."""
    f = os.open(path, flags)
    os.write(f, text)
    try:
        os.close(f)
        return False
    except OSError:
        return True


def text_commit_whose_metadata_put_fails(proxy):
    """A text rewrite of a 1-D string array stores its chunks, then the metadata, whose PUT is
    refused once: close fails, the mount serves the new text, and the next close stores the
    metadata, so zarr-python reads what was written."""
    prefix = f"text-{uuid.uuid4().hex[:8]}"
    a = zarr.open_group(s3store(prefix), mode="w").create_array("s", shape=(5,), chunks=(2,), dtype=str)
    a[:] = np.array(["a", "b", "c", "d", "e"])
    lines = [f"line {i}" for i in range(7)]
    text = "".join(f"{w}\n" for w in lines).encode()
    with Mount(f"s3://{BUCKET}/{prefix}", endpoint=proxy.url) as m:
        data = m.path("s/data")
        os.stat(data)
        proxy.refuse = ("PUT", f"/{BUCKET}/{prefix}/s/zarr.json")
        check(close_fails(data, os.O_WRONLY | os.O_TRUNC, text), "close fails when the metadata PUT of a text rewrite is refused")
        check(open(data, "rb").read() == text, "after the failed close the mount serves the new text")
        os.close(os.open(data, os.O_WRONLY))  # a close of a writable data stores what is left
    got = zarr.open_group(s3store(prefix), mode="r")["s"][...]
    check(list(got) == lines, f"the next close stores the metadata: zarr-python reads the new text ({list(got)})")


def text_append_whose_chunk_put_fails(proxy):
    """Lines appended to a 1-D string array rewrite the chunk its end cuts through and add
    chunks; the PUT of one new chunk is refused once: close fails, and the array keeps its old
    elements and length, at the mount and in the bucket. Appended again, the lines land."""
    prefix = f"append-{uuid.uuid4().hex[:8]}"
    a = zarr.open_group(s3store(prefix), mode="w").create_array("s", shape=(5,), chunks=(2,), dtype=str)
    old = ["a", "b", "c", "d", "e"]
    a[:] = np.array(old)
    added = [f"new {i}" for i in range(4)]
    text = "".join(f"{w}\n" for w in added).encode()
    with Mount(f"s3://{BUCKET}/{prefix}", endpoint=proxy.url) as m:
        data = m.path("s/data")
        before = open(data, "rb").read()
        proxy.refuse = ("PUT", f"/{BUCKET}/{prefix}/s/c/3")
        check(close_fails(data, os.O_WRONLY | os.O_APPEND, text), "close fails when a chunk PUT of a text append is refused")
        check(open(data, "rb").read() == before, "after the failed append the mount serves the old text")
        os.close(os.open(data, os.O_WRONLY))  # a close of a writable data stores what is left
        got = list(zarr.open_group(s3store(prefix), mode="r")["s"][...])
        check(got == old, f"the bucket keeps the old elements and length ({got})")
        with open(data, "ab") as f:
            f.write(text)
    got = list(zarr.open_group(s3store(prefix), mode="r")["s"][...])
    check(got == old + added, f"appended again, the lines land ({got})")


def conditional_put():
    prefix = f"cond-{uuid.uuid4().hex[:8]}"
    zarr.open_group(s3store(prefix), mode="w").create_array("a", data=np.zeros((8, 4), "u1"), chunks=(4, 4))
    with Mount(f"s3://{BUCKET}/{prefix}") as m:
        f = os.open(m.path("a/data"), os.O_RDWR)
        os.ftruncate(f, 12 * 4)  # the mount will store a new shape at the next flush
        other = zarr.open_group(s3store(prefix), mode="r+")["a"]
        other.attrs["writer"] = "another"  # another writer's metadata change
        try:
            os.fsync(f)
            refused = False
        except OSError:
            refused = True
        os.close(f) if not refused else None
        check(refused, "a flush over another writer's metadata change fails")
        check("conditional PUT refused" in open(m.log).read() or "another writer" in open(m.log).read(),
              "the log names the conflict")
    a = zarr.open_group(s3store(prefix), mode="r")["a"]
    check(a.attrs.get("writer") == "another", "the other writer's change is kept")


def mount_errors():
    d = tempfile.mkdtemp()
    for source, env, what in [(f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/x", {}, "no such bucket"),
                              (f"s3://{BUCKET}/no-store-here-{uuid.uuid4().hex[:6]}", {}, "is not a Zarr store"),
                              (f"s3://{BUCKET}/x", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "cannot reach the server")]:
        t0 = time.time()
        r = subprocess.run([BIN, "mount", source, d], capture_output=True, text=True, env=dict(os.environ, **env), timeout=120)
        lines = r.stderr.strip().splitlines()
        check(r.returncode != 0 and len(lines) == 1 and what in lines[0] and not os.path.ismount(d),
              f"mount {source} refused in one line ({r.returncode}, {r.stderr!r})")
        print(f"refused in {time.time() - t0:.1f} s: {lines[-1] if lines else ''}", flush=True)


class CredentialService:
    """A loopback stand-in for the services that hand out temporary AWS credentials: EC2
    instance metadata (IMDSv2: a session token, then the role, then its credentials), EKS pod
    identity (credentials for the bearer token of the pod) and STS AssumeRoleWithWebIdentity
    (credentials for a web identity token and a role; served over HTTPS, as object_store asks STS
    over HTTPS only, when `tls` gives a certificate and key). `asked` lists what each credential
    request presented (the IMDS session token, the pod's Authorization, or the web identity token
    and role)."""

    def __init__(self, key, secret, tls=None):
        import datetime
        import http.server
        import threading
        import urllib.parse
        expires = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        creds = json.dumps({"AccessKeyId": key, "SecretAccessKey": secret, "Token": "session-token", "Expiration": expires}).encode()
        sts = ('<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
               '<AssumeRoleWithWebIdentityResult><Credentials>'
               f'<AccessKeyId>{key}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>'
               f'<SessionToken>session-token</SessionToken><Expiration>{expires}</Expiration>'
               '</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>').encode()
        service = self
        self.asked = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body=b""):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self.answer(200, b"imds-session")
                self.answer(404)

            def do_GET(self):
                base = "/latest/meta-data/iam/security-credentials"
                if self.path.startswith(base) and self.headers.get("X-aws-ec2-metadata-token") != "imds-session":
                    return self.answer(401)
                if self.path in (base, base + "/"):
                    return self.answer(200, b"zarrfs-role")
                if self.path == base + "/zarrfs-role":
                    service.asked.append(self.headers.get("X-aws-ec2-metadata-token"))
                    return self.answer(200, creds)
                if self.path == "/pod-credentials":
                    service.asked.append(self.headers.get("Authorization"))
                    return self.answer(200 if self.headers.get("Authorization") == "pod-secret-token" else 403, creds)
                self.answer(404)

            def do_POST(self):
                q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                if self.headers.get("Content-Length"):
                    self.rfile.read(int(self.headers["Content-Length"]))
                if q.get("Action") != "AssumeRoleWithWebIdentity":
                    return self.answer(400)
                service.asked.append((q.get("WebIdentityToken"), q.get("RoleArn")))
                self.answer(200 if q.get("WebIdentityToken") == "web-identity-token" else 403, sts)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def rclone_s3(root, *flags, auth=("--auth-key", "ZARRFSKEY,zarrfs-secret")):
    """`rclone serve s3` of the directory `root` (its subdirectories are buckets) on a free
    loopback port, checking signatures for one key (`auth=()`: open to anyone, a public bucket);
    returns the process and the port."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    rclone = os.path.join(os.path.dirname(sys.executable), "rclone")
    server = subprocess.Popen([rclone, "serve", "s3", *auth, "--addr", f"127.0.0.1:{port}", *flags, root],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return server, port


def test_certificates(work):
    """A test CA and a server certificate for 127.0.0.1 it signed: paths of the CA's PEM, the
    certificate's and its key's."""
    import datetime
    import ipaddress
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject, key, issuer, issuer_key, ca):
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)])).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                                              encipher_only=False, decipher_only=False), critical=True)
        else:
            b = (b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                 .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
        return b.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("zarrfs test CA", ca_key, "zarrfs test CA", ca_key, True)
    cert = certificate("127.0.0.1", key, "zarrfs test CA", ca_key, False)
    paths = [os.path.join(work, n) for n in ("ca.pem", "server.pem", "server.key")]
    for path, data in zip(paths, [ca.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.PEM),
                                  key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption())]):
        with open(path, "wb") as f:
            f.write(data)
    return paths


def checked_credentials():
    """A server that checks credentials and signatures (`rclone serve s3 --auth-key`; moto's
    check rejects object_store's signed listings): a profile of the shared credentials file
    (AWS_PROFILE) with the right key mounts and reads, and so do temporary credentials from EC2
    instance metadata, EKS pod identity and web identity (STS over HTTPS); unknown keys, from the environment or a profile, are
    refused at mount time in one line that says so."""
    work = tempfile.mkdtemp()
    os.makedirs(os.path.join(work, "served", "bkt", "p"))
    with open(os.path.join(work, "served", "bkt", "p", "zarr.json"), "w") as f:
        f.write('{"zarr_format": 3, "node_type": "group", "attributes": {"profile": "read"}}')
    server, port = rclone_s3(os.path.join(work, "served"))
    try:
        creds = os.path.join(work, "credentials")
        with open(creds, "w") as f:
            f.write("[good]\naws_access_key_id = ZARRFSKEY\naws_secret_access_key = zarrfs-secret\n\n"
                    "[bad]\naws_access_key_id = WRONGKEY\naws_secret_access_key = wrong\n")
        base = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
        base.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_SHARED_CREDENTIALS_FILE=creds)
        d = tempfile.mkdtemp()
        r = subprocess.run([BIN, "mount", "s3://bkt/p", d], capture_output=True, text=True, env=dict(base, AWS_PROFILE="good"), timeout=120)
        try:
            check(r.returncode == 0 and os.path.ismount(d), f"AWS_PROFILE credentials mount ({r.returncode}, {r.stderr!r})")
            if r.returncode == 0:
                check(json.load(open(os.path.join(d, "zarr.json")))["attributes"] == {"profile": "read"}, "read with AWS_PROFILE credentials")
        finally:
            if os.path.ismount(d):
                subprocess.run([BIN, "unmount", d], check=True)
        # Temporary credentials from a credential service, as on EC2 (instance metadata, IMDSv2)
        # and in an EKS pod (pod identity: a URL and a bearer token file): a fake service on
        # loopback hands out the server's key with a session token.
        # Web identity (EKS IRSA, GitHub OIDC): a token file and a role, exchanged at STS over
        # HTTPS, here a stand-in whose certificate a test CA signed (SSL_CERT_FILE trusts it).
        service = CredentialService("ZARRFSKEY", "zarrfs-secret")
        ca, cert, key = test_certificates(work)
        sts = CredentialService("ZARRFSKEY", "zarrfs-secret", tls=(cert, key))
        token_file = os.path.join(work, "pod-token")
        with open(token_file, "w") as f:
            f.write("pod-secret-token")
        web_token = os.path.join(work, "web-identity-token")
        with open(web_token, "w") as f:
            f.write("web-identity-token")
        no_profile = dict(base, AWS_SHARED_CREDENTIALS_FILE=os.path.join(work, "none"), AWS_CONFIG_FILE=os.path.join(work, "none"))
        for what, service, env in [
                ("instance metadata (IMDSv2)", service, dict(no_profile, AWS_METADATA_ENDPOINT=service.url)),
                ("EKS pod identity", service, dict(no_profile, AWS_CONTAINER_CREDENTIALS_FULL_URI=f"{service.url}/pod-credentials",
                                                   AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token_file)),
                ("web identity (STS over HTTPS)", sts, dict(no_profile, AWS_WEB_IDENTITY_TOKEN_FILE=web_token,
                                                             AWS_ROLE_ARN="arn:aws:iam::123456789012:role/zarrfs",
                                                             AWS_ENDPOINT_URL_STS=sts.url, SSL_CERT_FILE=ca))]:
            service.asked.clear()
            r = subprocess.run([BIN, "mount", "s3://bkt/p", d], capture_output=True, text=True, env=env, timeout=120)
            try:
                check(r.returncode == 0 and os.path.ismount(d), f"credentials from {what} mount ({r.returncode}, {r.stderr!r})")
                if r.returncode == 0:
                    check(json.load(open(os.path.join(d, "zarr.json")))["attributes"] == {"profile": "read"}, f"read with credentials from {what}")
                check(service.asked, f"the credentials came from {what} ({service.asked})")
                if "pod" in what:
                    check(service.asked == ["pod-secret-token"] * len(service.asked), f"the pod's token was sent ({service.asked})")
                if "web" in what:
                    check(set(service.asked) == {("web-identity-token", "arn:aws:iam::123456789012:role/zarrfs")},
                          f"the web identity token and role were sent ({service.asked})")
            finally:
                if os.path.ismount(d):
                    subprocess.run([BIN, "unmount", d], check=True)
        # STS whose certificate nothing trusts: refused at mount time, not a mount that fails later.
        r = subprocess.run([BIN, "mount", "s3://bkt/p", d], capture_output=True, text=True, timeout=120,
                           env=dict(no_profile, AWS_WEB_IDENTITY_TOKEN_FILE=web_token, AWS_ROLE_ARN="arn:aws:iam::123456789012:role/zarrfs",
                                    AWS_ENDPOINT_URL_STS=sts.url))
        lines = r.stderr.strip().splitlines()
        check(r.returncode != 0 and len(lines) == 1 and "certificate is not trusted" in lines[0] and not os.path.ismount(d),
              f"an untrusted STS is refused in one line ({r.returncode}, {r.stderr!r})")
        print(f"refused (untrusted STS certificate): {lines[-1] if lines else ''}", flush=True)
        service.close()
        sts.close()
        for what, env in [("wrong keys in the environment", dict(base, AWS_ACCESS_KEY_ID="WRONGKEY", AWS_SECRET_ACCESS_KEY="wrong")),
                          ("a profile with wrong keys", dict(base, AWS_PROFILE="bad"))]:
            r = subprocess.run([BIN, "mount", "s3://bkt/p", d], capture_output=True, text=True, env=env, timeout=120)
            lines = r.stderr.strip().splitlines()
            check(r.returncode != 0 and len(lines) == 1 and "access denied" in lines[0] and "InvalidAccessKeyId" in lines[0]
                  and not os.path.ismount(d), f"{what} refused in one line ({r.returncode}, {r.stderr!r})")
            print(f"refused ({what}): {lines[-1] if lines else ''}", flush=True)
    finally:
        server.terminate()


def anonymous():
    """A public bucket (rclone serving it to anyone) and no credentials anywhere: `s3://` with
    `--no-sign-request`, and `s3a://` with AWS_SKIP_SIGNATURE=true, mount, list and read an
    array zarr-python wrote, and no request the proxy sees is signed."""
    work = tempfile.mkdtemp()
    want = np.arange(40 * 6, dtype="<i4").reshape(40, 6)
    g = zarr.open_group(os.path.join(work, "served", "pub", "p"), mode="w")
    g.create_array("a", data=want, chunks=(16, 6))
    g.create_array("sh", data=np.arange(64 * 64, dtype="<u2").reshape(64, 64), chunks=(8, 8), shards=(32, 32))
    server, port = rclone_s3(os.path.join(work, "served"), auth=())
    proxy = S3Proxy(f"http://127.0.0.1:{port}")
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")}
    env.update(AWS_ENDPOINT_URL=proxy.url, AWS_SHARED_CREDENTIALS_FILE=os.path.join(work, "none"), AWS_CONFIG_FILE=os.path.join(work, "none"))
    try:
        for what, args, extra in [("s3:// --no-sign-request", ["s3://pub/p", "--no-sign-request"], {}),
                                  ("s3a:// AWS_SKIP_SIGNATURE=true", ["s3a://pub/p"], {"AWS_SKIP_SIGNATURE": "true"})]:
            proxy.reset()
            d = tempfile.mkdtemp()
            r = subprocess.run([BIN, "mount", args[0], d, *args[1:]], capture_output=True, text=True, env=dict(env, **extra), timeout=120)
            try:
                check(r.returncode == 0 and os.path.ismount(d), f"{what} mounts a public bucket ({r.returncode}, {r.stderr!r})")
                if r.returncode == 0:
                    check("a" in os.listdir(d), f"{what}: the array is listed ({os.listdir(d)})")
                    with open(os.path.join(d, "a", "data"), "rb") as f:
                        check(f.read() == want.tobytes(), f"{what}: the array reads back")
                entries = proxy.entries()
                check(entries and not any(e[5] for e in entries), f"{what}: no request signed ({entries})")
                if r.returncode == 0:
                    # rclone answers a range under 200 with its Content-Range: still a range, so a
                    # point read of a shard asks for its index and one inner chunk, not the shard.
                    fd = os.open(os.path.join(d, "sh", "data"), os.O_RDONLY | os.O_DIRECT)
                    try:
                        proxy.settle()
                        proxy.reset()
                        got = os.pread(fd, 2, (40 * 64 + 41) * 2)
                    finally:
                        os.close(fd)
                    shard = [e for e in proxy.entries() if "/sh/c/" in e[1]]
                    check(int.from_bytes(got, "little") == 40 * 64 + 41 and len(shard) == 2 and all(e[0] == "GET" and e[2] for e in shard),
                          f"{what}: a sharded point read from rclone takes two ranged GETs ({shard})")
            finally:
                if os.path.ismount(d):
                    subprocess.run([BIN, "unmount", d], check=True)
    finally:
        proxy.close()
        server.terminate()


def virtual_hosted():
    """Virtual-hosted-style addressing (the bucket in the host name): rclone serves buckets by
    host name only (`--force-path-style=false`). The mount runs in a private mount namespace whose
    /etc/hosts names the bucket's host (nothing here resolves made-up names), reads an array
    zarr-python wrote and writes a row through the flat file; zarr-python reads the row back. The
    same server asked path-style finds no bucket, so the addressing is what reached it."""
    import shlex
    work = tempfile.mkdtemp()
    served = os.path.join(work, "served")
    want = np.arange(64 * 8, dtype="<i4").reshape(64, 8)
    zarr.open_group(os.path.join(served, "vbkt", "p"), mode="w").create_array("a", data=want, chunks=(16, 8))
    server, port = rclone_s3(served, "--force-path-style=false")
    host = "vbkt.s3.zarrfs.test"
    with open(os.path.join(work, "hosts"), "w") as f:
        f.write(f"127.0.0.1 localhost\n127.0.0.1 {host}\n")
    row = np.full(8, -7, dtype="<i4")
    row.tofile(os.path.join(work, "row.bin"))
    mnt = os.path.join(work, "mnt")
    os.mkdir(mnt)
    q = {k: shlex.quote(v) for k, v in dict(work=work, mnt=mnt, bin=BIN).items()}
    script = (f"set -e; mount --bind {q['work']}/hosts /etc/hosts; "
              f"{q['bin']} mount s3://vbkt/p {q['mnt']} --endpoint http://{host}:{port} --virtual-hosted; "
              f"trap '{q['bin']} unmount {q['mnt']}' EXIT; "
              f"cat {q['mnt']}/a/data > {q['work']}/read.bin; "
              f"dd if={q['work']}/row.bin of={q['mnt']}/a/data bs=32 seek=5 conv=notrunc status=none")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="ZARRFSKEY", AWS_SECRET_ACCESS_KEY="zarrfs-secret", AWS_ALLOW_HTTP="true", AWS_REGION=REGION)
    try:
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True, text=True,
                           env=env, timeout=120)
        check(r.returncode == 0, f"virtual-hosted mount, read and write ({r.returncode}, {r.stderr!r})")
        got = open(os.path.join(work, "read.bin"), "rb").read() if os.path.exists(os.path.join(work, "read.bin")) else b""
        check(got == want.tobytes(), "read through a virtual-hosted mount")
        want[5] = row
        back = zarr.open_array(os.path.join(served, "vbkt", "p", "a"), mode="r")[...]
        check(np.array_equal(back, want), "a row written through a virtual-hosted mount reads back in zarr-python")
        r = subprocess.run([BIN, "info", "s3://vbkt/p", "--endpoint", f"http://127.0.0.1:{port}"], capture_output=True, text=True,
                           env=env, timeout=120)
        check(r.returncode != 0 and "no such bucket" in r.stderr, f"path-style finds no bucket on that server ({r.returncode}, {r.stderr!r})")
    finally:
        server.terminate()


def fstab_forms():
    """`mount -t fuse.zarrfs s3://bucket/prefix DIR -o endpoint=...,region=...`, as an fstab line
    runs it: mount(8) runs mount.fuse3, which runs `zarrfs SOURCE DIR -o OPTS`."""
    link = "/usr/local/bin/zarrfs"
    made = not os.path.lexists(link)
    if made:
        os.symlink(BIN, link)
    prefix = f"fstab-{uuid.uuid4().hex[:8]}"
    g = zarr.open_group(s3store(prefix), mode="w")
    want = np.arange(12, dtype="<i4").reshape(3, 4)
    g.create_array("a", data=want, chunks=(2, 4))
    d = tempfile.mkdtemp()
    try:
        r = subprocess.run(["mount", "-t", "fuse.zarrfs", "-o", f"ro,nodev,endpoint={EP},region={REGION}", f"s3://{BUCKET}/{prefix}", d],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"mount -t fuse.zarrfs s3://... ({r.returncode}, {r.stderr!r})")
        if r.returncode == 0:
            check(open(os.path.join(d, "a", "data"), "rb").read() == want.tobytes(), "read through an fstab-style mount")
    finally:
        if os.path.ismount(d):
            subprocess.run(["umount", d], check=True)
        if made:
            os.remove(link)


def odd_keys():
    # Keys with `..`, `.` and empty parts under the prefix (legal S3 keys sloppy joins make):
    # they are passed over, the rest of the bucket serves, and a removal finishes.
    import boto3
    s3 = boto3.client("s3", endpoint_url=EP, region_name=REGION)
    prefix = f"odd-{uuid.uuid4().hex[:8]}"
    group = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
    array = json.dumps({"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
                        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
                        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]})
    for key, body in [("zarr.json", group), ("grp/zarr.json", group), ("grp/../x", "odd"), ("./y", "odd"), ("grp//z", "odd"),
                      ("arr/zarr.json", array), ("arr/c/0", bytes([1, 2, 3, 4])), ("arr/c//junk", "odd")]:
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=body)
    with Mount(f"s3://{BUCKET}/{prefix}") as m:
        check(sorted(os.listdir(m.dir)) == [".zarrfs", "arr", "grp", "zarr.json"], f"a root with odd keys lists ({sorted(os.listdir(m.dir))})")
        check(sorted(os.listdir(m.path("grp"))) == ["zarr.json"], f"a group with odd keys lists ({sorted(os.listdir(m.path('grp')))})")
        check(open(m.path("arr/data"), "rb").read() == bytes([1, 2, 3, 4]), "an array beside odd keys reads")
        r = subprocess.run(["rm", "-r", m.path("arr")], capture_output=True, text=True)
        check(r.returncode == 0 and not os.path.exists(m.path("arr")), f"rm -r of an array holding an odd key finishes ({r.stderr!r})")
        log = open(m.log).read()
        check("passed over" in log, "odd keys are said in the log")
    left = sorted(o["Key"][len(prefix) + 1:] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")["Contents"])
    check("arr/zarr.json" not in left and "arr/c/0" not in left, f"the array's own keys are gone ({left})")


def walks(proxy):
    """A walk of a hierarchy lists it once and fetches each document once, many at a time; a
    second walk within the metadata TTL asks for nothing; another writer's node shows after the
    TTL, the mount's own at once; a bucket that refuses listings still serves each node."""
    import boto3
    from plate import plate
    s3 = boto3.client("s3", endpoint_url=EP, region_name=REGION)
    prefix = f"walk-{uuid.uuid4().hex[:8]}"
    local = tempfile.mkdtemp()
    plate(local, 3, 4, 2, fmt=3, chunks=True)
    keys = []
    for d, _, files in os.walk(local):
        for f in files:
            key = os.path.relpath(os.path.join(d, f), local)
            keys.append(key)
            s3.upload_file(os.path.join(d, f), BUCKET, f"{prefix}/{key}")
    documents = [k for k in keys if k.endswith("zarr.json")]
    arrays = sorted(os.path.dirname(k) for k in documents if json.load(open(os.path.join(local, k)))["node_type"] == "array")
    data = sorted(os.path.join(a, "data") for a in arrays)
    with Mount(f"s3://{BUCKET}/{prefix}", "--metadata-ttl", "2", endpoint=proxy.url) as m:
        proxy.reset()
        found = subprocess.run(["find", m.dir, "-name", "data"], capture_output=True, text=True).stdout.split()
        asked = proxy.entries()
        lists = [e for e in asked if e[0] == "GET" and e[1] == f"/{BUCKET}"]
        gets = sorted(e[1][len(f"/{BUCKET}/{prefix}/"):] for e in asked if e[0] == "GET" and e[1] != f"/{BUCKET}")
        check(sorted(os.path.relpath(f, m.dir) for f in found) == data, f"a walk finds every array ({len(found)} of {len(data)})")
        check(len(lists) == 1 and gets == sorted(documents) and not [e for e in asked if e[0] == "HEAD"],
              f"a walk of {len(keys)} keys is one listing and one GET a document ({len(lists)} listings, {len(gets)} GETs "
              f"for {len(documents)} documents, {len(asked)} requests)")
        print(f"walks: find over {len(arrays)} arrays made {len(asked)} requests ({len(lists)} listing, {len(gets)} GETs)", flush=True)
        proxy.reset()
        again = subprocess.run(["find", m.dir, "-name", "data"], capture_output=True, text=True).stdout.split()
        check(sorted(again) == sorted(found) and not proxy.entries(), f"a second walk within the TTL asks for nothing ({proxy.entries()[:3]})")
        # The mount's own new group shows at once; another writer's after the TTL.
        os.mkdir(m.path("A/mine"))
        check("mine" in os.listdir(m.path("A")), "a group made through the mount is listed at once")
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/A/theirs/zarr.json", Body=json.dumps({"zarr_format": 3, "node_type": "group"}))
        time.sleep(2.5)
        check("theirs" in os.listdir(m.path("A")), f"another writer's group is listed after the TTL ({os.listdir(m.path('A'))})")
    for fmt in (3, 2):
        consolidated_walk(s3, proxy, fmt)
        trusted_walk(s3, proxy, fmt)
    walk_past_the_budget(s3, proxy)
    # A bucket whose listings are refused (GetObject granted, ListBucket not): each node still
    # serves, asked for alone (its siblings' listing, made meanwhile, refused).
    with Mount(f"s3://{BUCKET}/{prefix}", endpoint=proxy.url) as m:
        proxy.refuse = ("GET", f"/{BUCKET}")
        check(os.path.getsize(m.path(data[0])) == 2 * 64 * 64 * 2, f"a node serves when its directory's listing is refused ({data[0]})")
        deadline = time.time() + 10
        while not [e for e in proxy.entries() if e[3] == 403] and time.time() < deadline:
            time.sleep(0.05)
        refused = [e for e in proxy.entries() if e[3] == 403]
        check(len(refused) == 1, f"the listing was refused ({refused})")
        proxy.refuse = None


def consolidated_walk(s3, proxy, fmt):
    """With consolidated metadata stored after the nodes, a walk is the listing and the
    consolidating document: no node document is fetched but one another writer changed since
    (stored later), which shows as it now is. A document's file still serves its stored bytes."""
    from plate import plate
    prefix = f"walk-consolidated-v{fmt}-{uuid.uuid4().hex[:8]}"
    local = tempfile.mkdtemp()
    plate(local, 2, 3, 2, fmt=fmt, consolidated=True, chunks=True)
    root_docs = ["zarr.json"] if fmt == 3 else [".zattrs", ".zgroup", ".zmetadata"]
    # One entry that does not parse: its node's own document is fetched and decides.
    name = "zarr.json" if fmt == 3 else ".zarray"
    consolidating = os.path.join(local, root_docs[-1])
    root = json.load(open(consolidating))
    entries = root["consolidated_metadata"]["metadata"] if fmt == 3 else root["metadata"]
    entries["A/1/1/1" if fmt == 3 else "A/1/1/1/.zarray"]["shape"] = "not a shape"
    json.dump(root, open(consolidating, "w"))
    keys = sorted(os.path.relpath(os.path.join(d, f), local) for d, _, files in os.walk(local) for f in files)
    for key in keys:
        if key != root_docs[-1]:
            s3.upload_file(os.path.join(local, key), BUCKET, f"{prefix}/{key}")
    time.sleep(1.2)  # the store's times have whole seconds
    s3.upload_file(os.path.join(local, root_docs[-1]), BUCKET, f"{prefix}/{root_docs[-1]}")
    time.sleep(1.2)
    # Another writer grows one array and does not consolidate.
    changed = f"A/1/0/0/{name}"
    doc = json.load(open(os.path.join(local, changed)))
    doc["shape"][0] = 3
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{changed}", Body=json.dumps(doc, indent=4).encode())
    with Mount(f"s3://{BUCKET}/{prefix}", "--read-only", endpoint=proxy.url) as m:
        proxy.reset()
        found = subprocess.run(["find", m.dir, "-name", "data"], capture_output=True, text=True).stdout.split()
        asked = proxy.entries()
        lists = [e for e in asked if e[0] == "GET" and e[1] == f"/{BUCKET}"]
        gets = sorted(e[1][len(f"/{BUCKET}/{prefix}/"):] for e in asked if e[0] == "GET" and e[1] != f"/{BUCKET}")
        # v2: the directory's `zarr.json` is asked for too (absent), with the listing's first page.
        unparsed = f"A/1/1/1/{name}"
        want = sorted(["zarr.json"] * (fmt == 2) + root_docs + [changed, unparsed])
        check(len(found) == 2 * 3 * 2 and len(lists) == 1 and gets == want,
              f"v{fmt}: a walk with consolidated metadata fetches only the document changed since ({len(found)} arrays, "
              f"{len(lists)} listings, GETs {gets})")
        check(os.path.getsize(m.path("A/1/0/0/data")) == 3 * 64 * 64 * 2 and os.path.getsize(m.path("A/1/0/1/data")) == 2 * 32 * 32 * 2
              and os.path.getsize(m.path("A/1/1/1/data")) == 2 * 32 * 32 * 2,
              f"v{fmt}: the changed array and the one whose entry does not parse show their own documents, the others their entries")
        unchanged = f"A/1/1/0/{name}"
        stored = s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{unchanged}")["Body"].read()
        check(open(m.path(unchanged), "rb").read() == stored and os.path.getsize(m.path(unchanged)) == len(stored),
              f"v{fmt}: a document vouched for by consolidated metadata reads as stored")


def trusted_walk(s3, proxy, fmt):
    """--trust-consolidated: a walk is the root's consolidated metadata alone, as zarr-python
    reads it (no listing, no node document); a node another writer added or changed without
    consolidating shows as the consolidation has it, until a new consolidation is read after
    the metadata TTL. Chunks read as stored; a read-write mount that trusts is refused."""
    from plate import plate
    prefix = f"walk-trusted-v{fmt}-{uuid.uuid4().hex[:8]}"
    local = tempfile.mkdtemp()
    plate(local, 2, 3, 2, fmt=fmt, consolidated=True, chunks=True)
    for d, _, files in os.walk(local):
        for f in files:
            key = os.path.relpath(os.path.join(d, f), local)
            s3.upload_file(os.path.join(d, f), BUCKET, f"{prefix}/{key}")
    root_doc = "zarr.json" if fmt == 3 else ".zmetadata"
    name = "zarr.json" if fmt == 3 else ".zarray"
    # Another writer grows one array and adds a group, and does not consolidate.
    changed = f"A/1/0/0/{name}"
    doc = json.load(open(os.path.join(local, changed)))
    grown = dict(doc, shape=[3, *doc["shape"][1:]])
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{changed}", Body=json.dumps(grown).encode())
    group = {"zarr_format": 3, "node_type": "group"} if fmt == 3 else {"zarr_format": 2}
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/A/new/{'zarr.json' if fmt == 3 else '.zgroup'}", Body=json.dumps(group).encode())
    arrays = sorted(os.path.relpath(d, local) + "/data" for d, _, files in os.walk(local)
                    if ".zarray" in files or ("zarr.json" in files and json.load(open(os.path.join(d, "zarr.json")))["node_type"] == "array"))
    r = subprocess.run([BIN, "mount", f"s3://{BUCKET}/{prefix}", tempfile.mkdtemp(), "--trust-consolidated"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, AWS_ENDPOINT_URL=proxy.url))
    check(r.returncode == 2 and "needs a read-only mount" in r.stderr, f"a read-write mount that trusts is refused ({r.stderr!r})")
    with Mount(f"s3://{BUCKET}/{prefix}", "--trust-consolidated", "--read-only", "--metadata-ttl", "3", endpoint=proxy.url) as m:
        proxy.reset()
        found = sorted(os.path.relpath(f, m.dir) for f in
                       subprocess.run(["find", m.dir, "-name", "data"], capture_output=True, text=True).stdout.split())
        asked = [(e[0], e[1][len(f"/{BUCKET}/{prefix}/"):] if e[1] != f"/{BUCKET}" else "(listing)") for e in proxy.entries()]
        check(found == arrays and asked == [], f"v{fmt}: a trusting walk finds every consolidated array and asks for nothing after the "
              f"mount ({len(found)} of {len(arrays)} arrays, {asked})")
        check("new" not in os.listdir(m.path("A")), f"v{fmt}: a group added without consolidating is not shown ({os.listdir(m.path('A'))})")
        check(os.path.getsize(m.path("A/1/0/0/data")) == 2 * 64 * 64 * 2, f"v{fmt}: a node changed without consolidating shows as consolidated")
        want = np.asarray(zarr.open_array(os.path.join(local, "A/1/0/1"), mode="r")[...])
        check(open(m.path("A/1/0/1/data"), "rb").read() == le_bytes(want), f"v{fmt}: a trusted array's chunks read as stored")
        # A new consolidation shows once the metadata TTL has passed: one GET of the root.
        root = json.load(open(os.path.join(local, root_doc)))
        if fmt == 3:
            root["consolidated_metadata"]["metadata"]["A/1/0/0"] = grown
            root["consolidated_metadata"]["metadata"]["A/new"] = group
        else:
            root["metadata"]["A/1/0/0/.zarray"] = grown
            root["metadata"]["A/new/.zgroup"] = group
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{root_doc}", Body=json.dumps(root).encode())
        time.sleep(3.5)
        proxy.reset()
        listed = sorted(os.listdir(m.path("A")))
        size = os.path.getsize(m.path("A/1/0/0/data"))
        gets = [e[1][len(f"/{BUCKET}/{prefix}/"):] for e in proxy.entries()]
        check("new" in listed and size == 3 * 64 * 64 * 2 and sorted(gets) == ["zarr.json", ".zmetadata"][: 4 - fmt][::-1],
              f"v{fmt}: a new consolidation shows after the TTL, read in one request ({listed}, {size} bytes, {gets})")
    # A root that consolidates nothing: walked from listings, kept for the TTL as an untrusting
    # mount keeps them (one listing answers for every directory beneath).
    bare, local = f"{prefix}-bare", tempfile.mkdtemp()
    plate(local, 1, 2, 1, fmt=fmt, chunks=True)
    for d, _, files in os.walk(local):
        for f in files:
            key = os.path.relpath(os.path.join(d, f), local)
            s3.upload_file(os.path.join(d, f), BUCKET, f"{bare}/{key}")
    with Mount(f"s3://{BUCKET}/{bare}", "--trust-consolidated", "--read-only", "--metadata-ttl", "60", endpoint=proxy.url) as m:
        walk = lambda: sorted(subprocess.run(["find", m.dir, "-name", "data"], capture_output=True, text=True).stdout.split())
        proxy.reset()
        first = walk()
        lists = [e for e in proxy.entries() if e[0] == "GET" and e[1] == f"/{BUCKET}"]
        check(first and len(lists) == 1, f"v{fmt}: with nothing consolidated, a trusting walk lists the prefix once, as an untrusting "
              f"one does ({len(first)} arrays, {len(lists)} listings)")


def walk_past_the_budget(s3, proxy):
    """A listing stops at 5 000 keys (an array's chunks) and answers only for the keys it
    reached: the nodes listed after them are still all found, each directory past the budget
    listed when it is asked for, and the array's chunks read as stored."""
    from concurrent.futures import ThreadPoolExecutor
    prefix = f"walk-budget-{uuid.uuid4().hex[:8]}"
    n = 6000
    array = lambda shape, chunk: json.dumps({"zarr_format": 3, "node_type": "array", "shape": [shape], "data_type": "uint8",
                                             "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
                                             "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
                                             "codecs": [{"name": "bytes"}]})
    group = json.dumps({"zarr_format": 3, "node_type": "group"})
    objects = {"zarr.json": group, "a/zarr.json": array(n, 1), "b/zarr.json": array(4, 4), "b/c/0": bytes([1, 2, 3, 4]),
               "c/zarr.json": group, "c/x/zarr.json": array(2, 2)}
    objects.update({f"a/c/{i}": bytes([i % 251]) for i in range(n)})
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{kv[0]}", Body=kv[1]), objects.items()))
    with Mount(f"s3://{BUCKET}/{prefix}", "--read-only", "--metadata-ttl", "60", endpoint=proxy.url) as m:
        proxy.reset()
        found = sorted(os.path.relpath(f, m.dir) for f in
                       subprocess.run(["find", m.dir, "-name", "data"], capture_output=True, text=True).stdout.split())
        lists = [e for e in proxy.entries() if e[0] == "GET" and e[1] == f"/{BUCKET}"]
        check(found == ["a/data", "b/data", "c/x/data"] and len(lists) <= 12,
              f"a walk past a listing's budget finds every node ({found}, {len(lists)} listing requests)")
        print(f"walks: past the budget, find made {len(proxy.entries())} requests ({len(lists)} listing)", flush=True)
        proxy.reset()
        again = sorted(os.path.relpath(f, m.dir) for f in
                       subprocess.run(["find", m.dir, "-name", "data"], capture_output=True, text=True).stdout.split())
        check(again == found and not proxy.entries(), f"a second walk within the TTL asks for nothing ({proxy.entries()[:3]})")
        with open(m.path("a/data"), "rb") as f:
            ends = os.pread(f.fileno(), 8, 0) + os.pread(f.fileno(), 8, n - 8)
        check(ends == bytes(i % 251 for i in [*range(8), *range(n - 8, n)]), "the array past the budget reads as stored")
        check(open(m.path("b/data"), "rb").read() == bytes([1, 2, 3, 4]), "a node listed after the budget reads as stored")


def plain_http():
    # A public bucket, served to anonymous GETs as any web server would serve the files.
    import boto3
    s3 = boto3.client("s3", endpoint_url=EP, region_name=REGION)
    public = "zarrfs-public"
    s3.create_bucket(Bucket=public)
    prefix = f"http-{uuid.uuid4().hex[:8]}"
    store = ObjectStore(obstore.store.S3Store(public, prefix=prefix, endpoint=EP, access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                                              secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], region=REGION,
                                              client_options={"allow_http": True}))
    g = zarr.open_group(store, mode="w")
    want = np.arange(30 * 5, dtype="f8").reshape(30, 5)
    g.create_group("sub").create_array("a", data=want, chunks=(7, 5))
    zarr.consolidate_metadata(store)
    # Consolidated metadata naming nodes no path can have: passed over, the rest is served.
    root = json.loads(s3.get_object(Bucket=public, Key=f"{prefix}/zarr.json")["Body"].read())
    for odd in ["", "/x", "sub/../y"]:
        root["consolidated_metadata"]["metadata"][odd] = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    s3.put_object(Bucket=public, Key=f"{prefix}/zarr.json", Body=json.dumps(root))
    for o in s3.list_objects_v2(Bucket=public, Prefix=prefix)["Contents"]:
        s3.put_object_acl(Bucket=public, Key=o["Key"], ACL="public-read")
    # The same files over HTTPS: a TLS front whose certificate a test CA signed, trusted through
    # SSL_CERT_FILE; without it the mount is refused in one line.
    work = tempfile.mkdtemp()
    ca, cert, key = test_certificates(work)
    front = DelayProxy(EP, 0, tls=(cert, key))
    for url, env in [(f"{EP}/{public}/{prefix}", {}), (f"{front.url}/{public}/{prefix}", {"SSL_CERT_FILE": ca})]:
        scheme = url.split(":")[0]
        with Mount(url, env=env) as m:
            check(sorted(os.listdir(m.dir)) == [".zarrfs", "sub", "zarr.json"], f"{scheme} root listing {sorted(os.listdir(m.dir))}")
            check(sorted(os.listdir(m.path("sub"))) == ["a", "zarr.json"], f"{scheme} group listing {sorted(os.listdir(m.path('sub')))}")
            check(open(m.path("sub/a/data"), "rb").read() == le_bytes(want), f"{scheme} read")
            try:
                open(m.path("sub/a/data"), "r+b")
                check(False, f"{scheme} mounts are read-only")
            except OSError as e:
                check(e.errno == 30, f"{scheme} mounts are read-only (EROFS, got {e.errno})")
    check(front.requests > 0, "the https mount went through the TLS front")
    d = tempfile.mkdtemp()
    r = subprocess.run([BIN, "mount", f"{front.url}/{public}/{prefix}", d], capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    check(r.returncode != 0 and len(lines) == 1 and "certificate is not trusted" in lines[0] and not os.path.ismount(d),
          f"an https store whose certificate nothing trusts is refused in one line ({r.returncode}, {r.stderr!r})")


def reference_sets():
    """Kerchunk reference sets (tests/fixtures/kerchunk) with targets on the bucket: a set on the
    bucket with relative targets, a local set naming s3:// targets (read once --targets allows
    the bucket), and a set whose target is in another bucket (refused, EACCES)."""
    import boto3
    import netCDF4
    s3 = boto3.client("s3", endpoint_url=EP, region_name=REGION)
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "kerchunk")
    prefix = f"refs-{uuid.uuid4().hex[:8]}"
    for name in ["day0.nc", "day0.json"]:
        s3.upload_file(os.path.join(fixtures, name), BUCKET, f"{prefix}/{name}")
    with netCDF4.Dataset(os.path.join(fixtures, "day0.nc")) as ds:
        want = {v: le_bytes(np.ma.getdata(ds[v][...])) for v in ["air", "mask", "time"]}
    with Mount(f"reference:s3://{BUCKET}/{prefix}/day0.json") as m:
        for v, b in want.items():
            check(open(m.path(f"{v}/data"), "rb").read() == b, f"a set on the bucket reads {v} from its relative target")
    work = tempfile.mkdtemp(prefix="zarrfs-refs-")
    text = open(os.path.join(fixtures, "day0.json")).read().replace('"day0.nc"', f'"s3://{BUCKET}/{prefix}/day0.nc"')
    with open(os.path.join(work, "local.json"), "w") as f:
        f.write(text)
    with Mount(os.path.join(work, "local.json")) as m:
        try:
            open(m.path("air/data"), "rb").read()
            check(False, "an s3:// target outside the allowed prefixes is refused")
        except OSError as e:
            check(e.errno == errno.EACCES, f"an s3:// target outside the allowed prefixes is EACCES ({e})")
    with Mount(os.path.join(work, "local.json"), "--targets", f"s3://{BUCKET}/{prefix}") as m:
        check(open(m.path("air/data"), "rb").read() == want["air"], "--targets allows the bucket's prefix")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/other.json", Body=text.replace(f"s3://{BUCKET}/", "s3://another-bucket/"))
    with Mount(f"reference:s3://{BUCKET}/{prefix}/other.json") as m:
        try:
            open(m.path("air/data"), "rb").read()
            check(False, "a target in another bucket is refused")
        except OSError as e:
            check(e.errno == errno.EACCES, f"a target in another bucket is EACCES ({e})")
    shutil.rmtree(work, ignore_errors=True)


def main():
    proxy = S3Proxy(EP)
    reference_sets()
    interop()
    requests_counted(proxy)
    small_chunks_at_once(proxy)
    faults(proxy)
    recheck_during_a_flush(proxy, "c/3/0")
    recheck_during_a_flush(proxy, "zarr.json")
    read_after_a_background_store(proxy)
    text_commit_whose_metadata_put_fails(proxy)
    text_append_whose_chunk_put_fails(proxy)
    conditional_put()
    mount_errors()
    checked_credentials()
    anonymous()
    virtual_hosted()
    fstab_forms()
    odd_keys()
    walks(proxy)
    plain_http()
    print(f"check-s3: {RESULTS['passed']} passed, {RESULTS['failed']} failed", flush=True)
    sys.exit(1 if RESULTS["failed"] else 0)


if __name__ == "__main__":
    main()
