"""What the check scripts share: counting checks, mounting, and leaving no mount behind."""
import os
import subprocess


class Checks:
    """Counts checks by name; `finish` prints the tally and what failed, and gives the exit status."""

    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, []

    def __call__(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)

    def finish(self):
        print(f"{self.name}: {self.passed} passed, {len(self.failed)} failed")
        for f in self.failed:
            print("  FAILED", f)
        return 1 if self.failed else 0


def mount(binary, store, mnt, *extra):
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([binary, "mount", store, mnt, *extra], check=True, stderr=subprocess.DEVNULL)


def unmount(binary, mnt):
    # Lazily: memmaps numpy hands back stay open until collected.
    subprocess.run([binary, "unmount", "--lazy", mnt], check=True)


def detach_beneath(work):
    """Detach any mount left beneath `work` (a failed unmount) before `work` is removed: a
    removal through a live mount would remove the store."""
    for line in open("/proc/self/mountinfo"):
        point = line.split()[4]
        if point.startswith(work + "/"):
            subprocess.run(["umount", "-l", point], check=False)


def arrays(group, prefix=""):
    """Every array under a zarr-python group, with its path."""
    import zarr
    for name, node in group.members():
        path = f"{prefix}{name}"
        if isinstance(node, zarr.Array):
            yield path, node
        else:
            yield from arrays(node, path + "/")
