"""What a benchmark's part costs the machine: cores busy while it ran (from /proc/stat, every
process and the kernel), to be divided by its rate into core-seconds per MB."""
import os


def jiffies():
    """Busy and total jiffies of all cores so far."""
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(v) - v[3] - v[4], sum(v)


def cores(before):
    """The machine's cores busy since `before` (a `jiffies()`)."""
    after = jiffies()
    return (after[0] - before[0]) / max(1, after[1] - before[1]) * os.cpu_count()


def threads(pid):
    """CPU seconds (user and system) of process `pid`'s threads so far, by kind: the mount's
    decode workers, its FUSE request threads (which also carry the kernel's copy of each reply),
    and its other threads. From schedstat, in nanoseconds: /proc's per-thread times are in
    ticks, each thread's rounded down, which loses most of eight FUSE threads' few ms each."""
    out = {"workers": 0.0, "fuse": 0.0, "other": 0.0}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                comm = f.read()
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:  # the thread ended
            continue
        kind = "workers" if comm.startswith("zarrfs-worker") else "fuse" if comm.startswith("fuser") else "other"
        out[kind] += ns / 1e9
    return out


def beside(limit_cmd, contender):
    """Seconds until both `limit_cmd` (codec-limit, its input prepared before the clock starts)
    and `contender()` end, started together: two parts of one job done side by side on the same
    cores, with nothing joining them."""
    import subprocess
    import time
    tool = subprocess.Popen(limit_cmd, env={**os.environ, "CODEC_LIMIT_WAIT": "1"}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    if tool.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{limit_cmd[0]} did not get ready")
    t = time.perf_counter()
    tool.stdin.write("\n")
    tool.stdin.close()
    contender()
    tool.stdout.read()
    if tool.wait():
        raise RuntimeError(f"{limit_cmd[0]} failed")
    return time.perf_counter() - t
