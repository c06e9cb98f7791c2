#!/usr/bin/env python3
"""Every example in README.md and docs/ that can run is run, so that none goes stale.

A fenced block whose language is `sh` or `python` runs unless its info string says `norun`
(those need a bucket, systemd, Fiji or a published package). A file's blocks run in order, in
one scratch directory per file holding the demo store as `weather.zarr` (and
`demo/weather.zarr`), with this build's `zarrfs` first on PATH and its Python package
importable. `<!-- docs-check: COMMAND -->` lines in a file run as shell commands at their place
among its blocks, unseen by readers: the files an example takes for granted, made. A Python
block that defines `test_` functions runs under pytest with the package's plugin. A block
fails when it exits non-zero, or leaves a mount behind at the end of its file.

    scripts/check-docs.py target/release/zarrfs [FILE.md ...]
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks, detach_beneath  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.abspath(sys.argv[1])
check = Checks("check-docs")
# The mount points the examples use, cleared before and after each file.
MOUNT_POINTS = ["/tmp/w"]

STEP = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```[ \t]*$|^<!-- docs-check: (?P<command>.*?) -->$", re.S | re.M)


def steps(text):
    """The file's runnable steps in order: ("sh" | "python", code, line)."""
    for m in STEP.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if m.group("command") is not None:
            yield "sh", m.group("command"), line
            continue
        info = m.group("info").split()
        if info and info[0] in ("sh", "python") and "norun" not in info[1:]:
            yield info[0], m.group("body"), line


def clear_mounts():
    for point in MOUNT_POINTS:
        if os.path.ismount(point):
            subprocess.run([BIN, "unmount", "--lazy", point], check=False)
            if os.path.ismount(point):
                subprocess.run(["umount", "-l", point], check=False)
                return False
    return True


def run_file(path, python):
    work = tempfile.mkdtemp(prefix="zarrfs-docs-")
    os.chmod(work, 0o755)
    shutil.copytree(os.path.join(ROOT, "demo", "weather.zarr"), os.path.join(work, "weather.zarr"))
    shutil.copytree(os.path.join(ROOT, "demo", "weather.zarr"), os.path.join(work, "demo", "weather.zarr"))
    env = dict(os.environ, PATH=os.path.dirname(BIN) + os.pathsep + os.path.dirname(python) + os.pathsep + os.environ["PATH"],
               PYTHONPATH=os.path.join(ROOT, "python"), ZARRFS_BINARY=BIN)
    name = os.path.relpath(path, ROOT)
    clear_mounts()
    try:
        for n, (kind, code, line) in enumerate(steps(open(path).read())):
            if kind == "sh":
                command = ["bash", "-euo", "pipefail", "-c", code]
            elif "def test_" in code:
                test = os.path.join(work, f"test_docs_{n}.py")
                with open(test, "w") as f:
                    f.write(code)
                command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "zarrfs.pytest_plugin", test]
            else:
                command = [python, "-c", code]
            out = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
            said = (out.stdout + out.stderr).strip().replace("\n", "\n    ")
            check(out.returncode == 0, f"{name}:{line}: exit {out.returncode}\n    {said}")
        check(clear_mounts() and not any(os.path.ismount(p) for p in MOUNT_POINTS), f"{name}: its examples left a mount behind")
    finally:
        clear_mounts()
        detach_beneath(work)
        shutil.rmtree(work, ignore_errors=True)


def main():
    python = os.path.join(subprocess.run([os.path.join(ROOT, "scripts", "python-env")], capture_output=True, text=True,
                                         check=True).stdout.strip(), "bin", "python")
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    # Named files only, when some are named (`scripts/check-docs.py BIN docs/troubleshooting.md`).
    if sys.argv[2:]:
        files = [os.path.abspath(f) for f in sys.argv[2:]]
    for path in files:
        run_file(path, python)
    sys.exit(check.finish())


main()
