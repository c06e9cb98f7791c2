"""Soak: 8 readers and 4 writers (pwrite, ftruncate, fsync, mmap writes) on 4 arrays through one
mount with a small dirty limit and cache, for a while. Every read is checked against a model of
each array; the daemon's RSS must stay bounded; at the end zarr-python must read exactly what
the mount showed last. Usage: python scripts/soak.py ZARRFS [SECONDS] [s3]

With `s3`, the arrays live in the bucket of an S3-compatible server (scripts/with-store s3 starts one
and says where in the environment) and the mount serves s3://BUCKET/PREFIX."""

import mmap
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import zarr

BIN = os.path.abspath(sys.argv[1])
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
CACHE, DIRTY = 16 << 20, 4 << 20
# What the daemon may hold beyond its cache and dirty limit (code, threads, buffers in flight).
RSS_SLACK = 96 << 20
COLS = 512  # uint16: 1 KiB rows
MAX_ROWS = 4096

ON_S3 = len(sys.argv) > 3 and sys.argv[3] == "s3"

work = tempfile.mkdtemp()
mnt = os.path.join(work, "mnt")
os.mkdir(mnt)
if ON_S3:
    import obstore.store
    from zarr.storage import ObjectStore

    bucket, prefix = os.environ["ZARRFS_TEST_S3_BUCKET"], f"soak-{os.getpid()}"
    store = f"s3://{bucket}/{prefix}"
    zstore = ObjectStore(obstore.store.S3Store(bucket, prefix=prefix, endpoint=os.environ["AWS_ENDPOINT_URL"],
                                               access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                                               secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                                               region=os.environ.get("AWS_REGION", "us-east-1"),
                                               client_options={"allow_http": True}))
else:
    store = zstore = os.path.join(work, "store.zarr")
root = zarr.open_group(zstore, mode="w")
layouts = {
    "plain": dict(chunks=(64, 128), compressors=None),
    "zstd": dict(chunks=(64, 128)),
    "sharded": dict(chunks=(16, 128), shards=(64, 256)),
    "blosc": dict(chunks=(32, 512), compressors=zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle")),
}
rng = np.random.default_rng(1)
models = {}
for name, kw in layouts.items():
    init = rng.integers(0, 65535, size=(1024, COLS), dtype=np.uint16)
    a = root.create_array(name, shape=init.shape, dtype="uint16", fill_value=0, **kw)
    a[:] = init
    models[name] = bytearray(init.tobytes())

log = open(os.path.join(work, "zarrfs.log"), "w")
daemon = subprocess.Popen([BIN, "mount", "-f", store, mnt, "--cache-size", str(CACHE), "--dirty-limit", str(DIRTY)],
                          stderr=log, stdout=subprocess.DEVNULL)
for _ in range(200):
    if any(f" {mnt} " in line for line in open("/proc/self/mountinfo")):
        break
    time.sleep(0.05)
else:
    sys.exit("soak: the mount did not come up")

locks = {name: threading.Lock() for name in layouts}
stop = time.monotonic() + SECONDS
errors = []
counts = {"read": 0, "pwrite": 0, "truncate": 0, "fsync": 0, "mmap": 0}
row = COLS * 2


def fail(msg):
    errors.append(msg)


def explain(fd, got, model, off):
    """Where a read differs, and whether reading again (from the kernel's pages, then from the
    daemon with those pages dropped) still does: tells a stale page from a wrong daemon."""
    want = bytes(model[off:off + len(got)])
    if len(got) != len(want):
        return f"{len(got)} bytes, the model has {len(want)}"
    diff = [i for i in range(len(got)) if got[i] != want[i]]
    first, last = diff[0], diff[-1]
    zeros = all(got[i] == 0 for i in diff)
    again = os.pread(fd, len(got), off) == want
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    fresh = os.pread(fd, len(got), off) == want
    return (f"{len(diff)} bytes differ at file offsets {off + first}..{off + last} "
            f"(rows {(off + first) // row}..{(off + last) // row} of {len(model) // row}), "
            f"{'fill' if zeros else 'values'} where the model has {'fill' if not any(want[first:last + 1]) else 'values'}; "
            f"read again: {'right' if again else 'wrong'}; with the kernel's pages dropped: {'right' if fresh else 'wrong'}")


def reader(seed):
    r = random.Random(seed)
    fds = {n: os.open(os.path.join(mnt, n, "data"), os.O_RDONLY) for n in layouts}
    try:
        while time.monotonic() < stop and not errors:
            name = r.choice(list(layouts))
            with locks[name]:
                model = models[name]
                if not model:
                    continue
                off = r.randrange(len(model))
                n = r.randrange(1, 256 << 10)
                got = os.pread(fds[name], n, off)
                if got != bytes(model[off:off + n]):
                    fail(f"{name}: read {n} at {off} differs from the model: {explain(fds[name], got, model, off)}")
                counts["read"] += 1
    except OSError as e:
        fail(f"reader: {e}")
    finally:
        for fd in fds.values():
            os.close(fd)


def writer(name, seed):
    r = random.Random(seed)
    path = os.path.join(mnt, name, "data")
    fd = os.open(path, os.O_RDWR)
    try:
        while time.monotonic() < stop and not errors:
            op = r.choices(["pwrite", "truncate", "fsync", "mmap"], weights=[10, 2, 1, 3])[0]
            with locks[name]:
                model = models[name]
                rows = len(model) // row
                if op == "pwrite":
                    off = r.randrange(max(1, len(model) + row))
                    n = r.randrange(1, 128 << 10)
                    data = r.randbytes(n)
                    os.pwrite(fd, data, off)
                    end = off + n
                    if end > len(model):
                        end_rows = -(-end // row)
                        model.extend(b"\0" * (end_rows * row - len(model)))
                    model[off:off + n] = data
                elif op == "truncate":
                    new_rows = r.randrange(0, MAX_ROWS)
                    os.ftruncate(fd, new_rows * row)
                    if new_rows * row < len(model):
                        del model[new_rows * row:]
                    else:
                        model.extend(b"\0" * (new_rows * row - len(model)))
                elif op == "fsync":
                    os.fsync(fd)
                elif rows:
                    m = mmap.mmap(fd, len(model))
                    off = r.randrange(len(model))
                    n = min(r.randrange(1, 64 << 10), len(model) - off)
                    data = r.randbytes(n)
                    m[off:off + n] = data
                    m.flush()
                    m.close()
                    model[off:off + n] = data
                counts[op] += 1
    except OSError as e:
        fail(f"writer {name}: {e}")
    finally:
        os.close(fd)


def rss():
    with open(f"/proc/{daemon.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
threads += [threading.Thread(target=writer, args=(n, 100 + i)) for i, n in enumerate(layouts)]
for t in threads:
    t.start()
peak = 0
while any(t.is_alive() for t in threads):
    peak = max(peak, rss())
    time.sleep(0.2)
for t in threads:
    t.join()

shown = {}
if not errors:
    for name in layouts:
        with open(os.path.join(mnt, name, "data"), "rb") as f:
            shown[name] = f.read()
        if shown[name] != bytes(models[name]):
            fail(f"{name}: the mount's last view differs from the model")
subprocess.run([BIN, "unmount", mnt], check=False)
daemon.wait(timeout=60)
if peak > CACHE + DIRTY + RSS_SLACK:
    fail(f"daemon RSS peaked at {peak >> 20} MiB, above cache + dirty limit + {RSS_SLACK >> 20} MiB")
if not errors:
    for name in layouts:
        stored = zarr.open_group(zstore, mode="r")[name][:]
        if stored.tobytes() != shown[name]:
            fail(f"{name}: zarr-python reads {stored.shape}, not what the mount showed last")
log.close()
ops = sum(counts.values())
print(f"soak: {SECONDS:.0f} s, 8 readers, 4 writers, {ops} ops {counts}, peak RSS {peak >> 20} MiB")
if errors:
    print("\n".join(errors[:10]), file=sys.stderr)
    print(open(os.path.join(work, "zarrfs.log")).read()[-3000:], file=sys.stderr)
    print("soak: 0 passed, 1 failed")
    sys.exit(1)
subprocess.run(["rm", "-rf", work])
print("soak: 1 passed, 0 failed")
