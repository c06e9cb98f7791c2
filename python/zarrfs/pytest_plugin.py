"""A pytest fixture for tests that read or write Zarr stores through a zarrfs mount.

    def test_mean(zarrfs_mount):
        m = zarrfs_mount("tests/data/weather.zarr", read_only=True)
        a = np.load(m.path / "temp" / "data.npy", mmap_mode="r")
        assert a.shape == (24, 4, 6)

Each call mounts a store on a fresh directory under the test's `tmp_path`; every mount is
unmounted when the test ends, and a mount whose last flush failed fails the test.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

import zarrfs


@pytest.fixture
def zarrfs_mount(tmp_path_factory: pytest.TempPathFactory) -> Any:
    mounts: list[zarrfs.Mount] = []

    def make(store: str | os.PathLike[str], **options: Any) -> zarrfs.Mount:
        mountpoint = tmp_path_factory.mktemp("zarrfs-mount")
        m = zarrfs.start(store, mountpoint, **options)
        mounts.append(m)
        return m

    make_typed: Callable[..., zarrfs.Mount] = make
    yield make_typed
    failures = []
    for m in reversed(mounts):
        try:
            m.unmount()
        except zarrfs.UnmountError as e:
            failures.append(f"{m}: {e}")
    if failures:
        pytest.fail("zarrfs: " + "; ".join(failures), pytrace=False)
