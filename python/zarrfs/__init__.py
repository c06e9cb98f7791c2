"""Mount Zarr stores with zarrfs from Python.

    import numpy as np, zarrfs

    with zarrfs.mount("weather.zarr", "/tmp/w", cache_size="2G") as m:
        temp = np.load(m.path / "temp" / "data.npy", mmap_mode="r")
        print(temp.mean())
    # unmounted here; an exception if a change could not be stored

The `zarrfs` program itself comes with this package (`pip install zarrfs`); this module runs it.
`zarrfs.zarr_plugin` teaches zarr-python the `offset` chunk key encoding of prepended arrays.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

__all__ = ["Mount", "MountError", "UnmountError", "binary", "mount"]

# `zarrfs unmount` exits with this when the mount is in use and nothing was done.
_EXIT_BUSY = 3


class MountError(RuntimeError):
    """The mount could not be made; the message is the daemon's."""


class UnmountError(RuntimeError):
    """The unmount failed: a change could not be stored, or the mount stayed in use."""


def binary() -> str:
    """The zarrfs program: `$ZARRFS_BINARY`, the one installed with this package, or PATH's."""
    explicit = os.environ.get("ZARRFS_BINARY")
    if explicit:
        return explicit
    for scripts in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(scripts, "zarrfs")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("zarrfs")
    if found is None:
        raise FileNotFoundError("the zarrfs program is not installed (pip install zarrfs) nor on PATH")
    return found


def _options(options: dict[str, Any]) -> list[str]:
    """Keyword options as `-o` mount options: `read_only=True` is `ro`, `cache_size="2G"` is
    `cache_size=2G`, `views=["npy", "tiff"]` is `views=npy:tiff`; False and None are left out."""
    out: list[str] = []
    for key, value in options.items():
        name = "ro" if key == "read_only" else key
        if value is None or value is False:
            continue
        if value is True:
            out.append(name)
        elif isinstance(value, (list, tuple)):
            out.append(f"{name}={':'.join(str(v) for v in value)}")
        else:
            text = str(value)
            if "," in text:
                text = text.replace(",", "\\,")
            out.append(f"{name}={text}")
    return ["-o", ",".join(out)] if out else []


class Mount:
    """A live mount: its `path`, the daemon's counters (`stats()`) and `status()`."""

    def __init__(self, store: str, path: Path, program: str) -> None:
        self.store = store
        self.path = path
        self._program = program
        self.mounted = True

    def stats(self) -> dict[str, Any]:
        """The daemon's counters (`.zarrfs/stats`)."""
        return json.loads((self.path / ".zarrfs" / "stats").read_text())

    def status(self) -> str:
        """What the daemon holds, what it failed to store, and its recent errors."""
        done = subprocess.run([self._program, "status", str(self.path)], capture_output=True, text=True)
        return done.stdout + done.stderr

    def unmount(self, lazy: bool = False, wait: float = 5.0) -> None:
        """Store every change and unmount. Raises `UnmountError` with the daemon's message when
        a change could not be stored. While the mount is in use (a file or memmap still open
        here), it waits up to `wait` seconds for it to close."""
        if not self.mounted:
            return
        deadline = time.monotonic() + wait
        while True:
            args = [self._program, "unmount", *(["--lazy"] if lazy else []), str(self.path)]
            done = subprocess.run(args, capture_output=True, text=True)
            if done.returncode == _EXIT_BUSY and time.monotonic() < deadline:
                gc.collect()  # a memmap nobody references holds the mount until collected
                time.sleep(0.1)
                continue
            if done.returncode != _EXIT_BUSY:
                self.mounted = False
            if done.returncode != 0:
                raise UnmountError(done.stderr.strip() or f"zarrfs unmount exited {done.returncode}")
            return

    def unmount_when_unused(self) -> None:
        """Unmount as soon as nothing uses the mount any more (a memmap collected, this process
        gone), storing every change then: a process of its own waits for that, so the mount
        never outlives its users. What it could not store, the daemon's log says."""
        if not self.mounted:
            return
        subprocess.Popen([sys.executable, "-c", _UNMOUNT_WHEN_UNUSED, self._program, str(self.path)], cwd="/",
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
        self.mounted = False

    def __repr__(self) -> str:
        return f"Mount({self.store!r} on {str(self.path)!r})"


# Run by `unmount_when_unused` in a process of its own, outside the mount: `zarrfs unmount`
# again every second while the mount is busy (exit 3).
_UNMOUNT_WHEN_UNUSED = f"""
import subprocess, sys, time
while subprocess.run([sys.argv[1], "unmount", sys.argv[2]], capture_output=True).returncode == {_EXIT_BUSY}:
    time.sleep(1)
"""


def start(store: str | os.PathLike[str], mountpoint: str | os.PathLike[str], **options: Any) -> Mount:
    """Mount `store` on `mountpoint` (made if missing) and return once the mount is live.
    Options are the mount's `-o` options as keywords (see `zarrfs mount --help`), plus
    `log_file`. Raises `MountError` with the daemon's message."""
    program = binary()
    path = Path(mountpoint)
    path.mkdir(parents=True, exist_ok=True)
    log_file = options.pop("log_file", None)
    args = [program, "mount", os.fspath(store), str(path), *_options(options)]
    if log_file is not None:
        args += ["--log-file", os.fspath(log_file)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise MountError(done.stderr.strip() or f"zarrfs mount exited {done.returncode}")
    return Mount(os.fspath(store), path, program)


@contextlib.contextmanager
def mount(store: str | os.PathLike[str], mountpoint: str | os.PathLike[str], **options: Any) -> Iterator[Mount]:
    """`start()` as a context manager: unmounts on exit, and raises `UnmountError` when the last
    flush could not store everything (after the block's own exception, if it raised). A mount
    still in use when the block ends (a memmap alive past it) is unmounted once it is no longer
    used, or when the process exits, with a warning saying so (`Mount.unmount_when_unused`)."""
    m = start(store, mountpoint, **options)
    try:
        yield m
    finally:
        try:
            m.unmount()
        except UnmountError as e:
            if not m.mounted or "busy" not in str(e):
                raise
            m.unmount_when_unused()
            warnings.warn(f"{m.path} is still in use at the end of its with block ({e}): it is unmounted, every "
                          "change stored, once nothing uses it (a memmap collected, or this process gone)",
                          RuntimeWarning, stacklevel=3)
