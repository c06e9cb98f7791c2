#!/usr/bin/env python3
"""The metrics endpoint (`--metrics-addr`) as operators use it:

- a real Prometheus server (Debian's `prometheus`) scrapes a mount every second, and its query
  API returns the counters after a read and a write through the mount: the bytes read and
  written, requests by kind, chunk decodes and encodes, chunks written back;
- `prometheus_client`'s parser reads every family of a scrape, of the type it says; each
  histogram's buckets rise to its count;
- with a bucket (run under `scripts/with-store s3`): the HTTP requests to it, by method and
  status, with their latency histogram.

    scripts/check-metrics.py target/release/zarrfs
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import numpy as np
import zarr
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks, detach_beneath  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
check = Checks("check-metrics")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Mount:
    """A foreground daemon with its metrics at a free loopback port."""

    def __init__(self, work, source, env=None):
        self.dir = tempfile.mkdtemp(dir=work, prefix="mnt-")
        self.port = free_port()
        self.log = self.dir + ".log"
        self.proc = subprocess.Popen([BIN, "mount", "-f", source, self.dir, "--metrics-addr", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), env=dict(os.environ, **(env or {})))
        deadline = time.time() + 30
        while not os.path.ismount(self.dir):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"mount failed: {open(self.log).read()}")
            time.sleep(0.02)

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return r.headers.get("Content-Type", ""), r.read().decode()

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def families(text):
    """Every family of a scrape by name, as prometheus_client parses it."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, family, name, **labels):
    for s in fams[family].samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def check_parsed(text, what):
    fams = families(text)
    check(len(fams) >= 24, f"{what}: {len(fams)} families parsed")
    for name, f in fams.items():
        check(f.type in ("counter", "gauge", "histogram"), f"{what}: {name} is a {f.type}")
        if f.type != "histogram":
            continue
        by_series = {}
        for s in f.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            by_series.setdefault(key, {"buckets": [], "count": None})
            if s.name.endswith("_bucket"):
                by_series[key]["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                by_series[key]["count"] = s.value
        for key, series in by_series.items():
            counts = [v for _, v in sorted(series["buckets"])]
            check(counts == sorted(counts) and counts[-1] == series["count"],
                  f"{what}: {name}{dict(key)} buckets {counts} rise to the count {series['count']}")
    return fams


class Prometheus:
    """A Prometheus server scraping `targets` every second."""

    def __init__(self, work, targets):
        self.port = free_port()
        data = os.path.join(work, "prometheus")
        os.makedirs(data)
        config = os.path.join(data, "prometheus.yml")
        with open(config, "w") as f:
            json.dump({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                       "scrape_configs": [{"job_name": "zarrfs", "static_configs": [{"targets": targets}]}]}, f)
        self.proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}/tsdb",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(data, "log"), "w"))

    def query(self, promql):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as r:
            answer = json.load(r)
        return [float(v["value"][1]) for v in answer["data"]["result"]]

    def wait_for(self, promql, ok, seconds=60):
        """The query's values once `ok` holds of them (or the last seen, at the deadline)."""
        deadline, seen = time.time() + seconds, None
        while time.time() < deadline:
            try:
                seen = self.query(promql)
                if ok(seen):
                    return seen
            except OSError:
                pass
            time.sleep(0.5)
        return seen

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def local(work):
    store = os.path.join(work, "store.zarr")
    a = zarr.create_array(store, name="t", shape=(64, 1024), chunks=(16, 1024), dtype="f4",
                          compressors=zarr.codecs.ZstdCodec(level=1))
    model = np.arange(64 * 1024, dtype="f4").reshape(64, 1024)
    a[:] = model
    m = Mount(work, store)
    prom = Prometheus(work, [f"127.0.0.1:{m.port}"])
    try:
        kind, text = m.scrape()
        check(kind.startswith("text/plain; version=0.0.4"), f"content type {kind}")
        check_parsed(text, "a fresh mount")
        check(prom.wait_for('up{job="zarrfs"}', lambda v: v == [1.0]) == [1.0], "Prometheus scrapes the mount")

        data = os.path.join(m.dir, "t", "data")
        read = np.fromfile(data, dtype="<f4").reshape(64, 1024)
        check(np.array_equal(read, model), "the read gives zarr-python's values")
        rows = np.full((4, 1024), -1, dtype="<f4")
        with open(data, "r+b") as f:
            f.seek(8 * 1024 * 4)
            f.write(rows.tobytes())
        model[8:12] = rows
        check(np.array_equal(zarr.open_array(store, path="t")[:], model), "zarr-python reads the write")

        want = {
            "zarrfs_read_bytes_total": model.nbytes,
            "zarrfs_written_bytes_total": rows.nbytes,
            'zarrfs_requests_total{op="read"}': 1,
            'zarrfs_requests_total{op="write"}': 1,
            "zarrfs_chunk_decode_seconds_count": 4,
            "zarrfs_chunk_encode_seconds_count": 1,
            "zarrfs_write_back_chunks_total": 1,
            "zarrfs_cache_misses_total": 4,
        }
        for promql, least in want.items():
            seen = prom.wait_for(promql, lambda v, least=least: len(v) == 1 and v[0] >= least)
            check(seen is not None and len(seen) == 1 and seen[0] >= least, f"Prometheus: {promql} = {seen}, at least {least}")
        seen = prom.query("zarrfs_write_back_failures_total")
        check(seen == [0.0], f"Prometheus: no write-back failed ({seen})")
        seen = prom.query("zarrfs_dirty_bytes")
        check(seen == [0.0], f"Prometheus: nothing left dirty ({seen})")
        seen = prom.query('histogram_quantile(0.5, rate(zarrfs_chunk_decode_seconds_bucket[1m]))')
        check(len(seen) == 1, f"Prometheus: a decode time quantile ({seen})")

        fams = check_parsed(m.scrape()[1], "after a read and a write")
        check(sample(fams, "zarrfs_read_bytes", "zarrfs_read_bytes_total") >= model.nbytes, "parsed: the bytes read")
    finally:
        prom.close()
        m.close()


def bucket(work):
    """A store in the bucket of `scripts/with-store s3`, read and written through a mount."""
    import obstore.store
    from zarr.storage import ObjectStore
    prefix = f"metrics-{os.getpid()}"
    s = obstore.store.S3Store(os.environ["ZARRFS_TEST_S3_BUCKET"], prefix=prefix, endpoint=os.environ["AWS_ENDPOINT_URL"],
                              access_key_id=os.environ["AWS_ACCESS_KEY_ID"], secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                              region=os.environ.get("AWS_REGION", "us-east-1"), client_options={"allow_http": True})
    a = zarr.create_array(ObjectStore(s), name="t", shape=(4096,), chunks=(1024,), dtype="u1")
    a[:] = 3
    m = Mount(work, f"s3://{os.environ['ZARRFS_TEST_S3_BUCKET']}/{prefix}", env={"AWS_ALLOW_HTTP": "true"})
    try:
        data = os.path.join(m.dir, "t", "data")
        check(open(data, "rb").read() == b"\x03" * 4096, "the bucket's array reads through the mount")
        with open(data, "r+b") as f:
            f.write(b"\x05" * 100)
        fams = check_parsed(m.scrape()[1], "a bucket's mount")
        f = "zarrfs_store_http_requests"
        gets = sample(fams, f, f + "_total", method="GET", status="2xx")
        puts = sample(fams, f, f + "_total", method="PUT", status="2xx")
        check(gets is not None and gets >= 4, f"HTTP GETs answered 2xx counted ({gets})")
        check(puts is not None and puts >= 1, f"HTTP PUTs answered 2xx counted ({puts})")
        h = "zarrfs_store_http_request_seconds"
        n = sample(fams, h, h + "_count", method="GET")
        check(n is not None and n >= gets, f"every GET timed ({n} of {gets})")
        ops = sample(fams, "zarrfs_store_operations", "zarrfs_store_operations_total", kind="put")
        check(ops is not None and ops >= 1, f"the store's PUT operations counted ({ops})")
    finally:
        m.close()


def main():
    if not shutil.which("prometheus"):
        sys.exit("check-metrics: Debian's prometheus is not installed (scripts/test installs it)")
    work = tempfile.mkdtemp(prefix="zarrfs-metrics-")
    try:
        local(work)
        if os.environ.get("ZARRFS_TEST_S3_BUCKET"):
            bucket(work)
    finally:
        detach_beneath(work)
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(check.finish())


main()
