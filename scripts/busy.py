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
