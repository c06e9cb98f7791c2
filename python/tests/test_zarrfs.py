"""The Python package as a user meets it: installed from the wheel into a fresh venv, the
`zarrfs_mount` fixture and `zarrfs.mount()` mount stores zarr-python wrote, and stock zarr-python
reads prepended arrays through the package's entry point."""

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

import zarrfs


def make_store(path, shape=(6, 5), chunks=(2, 5), dtype="float32"):
    root = zarr.open_group(str(path), mode="w")
    a = root.create_array("temp", shape=shape, chunks=chunks, dtype=dtype, fill_value=0)
    model = np.arange(np.prod(shape), dtype=dtype).reshape(shape) * 1.5
    a[...] = model
    return model


def test_the_program_comes_with_the_package():
    program = zarrfs.binary()
    assert program.startswith(sys.prefix), f"{program} is not the one installed with the package"
    done = subprocess.run([program, "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("zarrfs ")


def test_the_fixture_mounts_and_numpy_reads_the_array(zarrfs_mount, tmp_path):
    model = make_store(tmp_path / "s.zarr")
    m = zarrfs_mount(tmp_path / "s.zarr", read_only=True)
    flat = np.memmap(m.path / "temp" / "data", dtype="<f4", mode="r", shape=model.shape)
    assert np.array_equal(flat, model)
    assert np.array_equal(np.load(m.path / "temp" / "data.npy"), model)
    stats = m.stats()
    assert stats["pid"] > 0 and stats["store"] == str(tmp_path / "s.zarr")


def test_writes_through_the_mount_are_read_back_by_zarr_python(tmp_path):
    model = make_store(tmp_path / "s.zarr")
    with zarrfs.mount(tmp_path / "s.zarr", tmp_path / "mnt") as m:
        flat = np.memmap(m.path / "temp" / "data", dtype="<f4", mode="r+", shape=model.shape)
        flat[1:3] = -7
        flat.flush()
        del flat
        model[1:3] = -7
    assert not os.path.ismount(tmp_path / "mnt")
    assert np.array_equal(zarr.open_array(str(tmp_path / "s.zarr" / "temp"))[...], model)


def test_stock_zarr_python_reads_a_prepended_array(zarrfs_mount, tmp_path):
    model = make_store(tmp_path / "s.zarr")
    m = zarrfs_mount(tmp_path / "s.zarr", adopt_offset=True)
    rows = np.full((2, 5), 42, dtype="<f4")
    with open(m.path / "temp" / "prepend", "wb") as f:
        f.write(rows.tobytes())
    m.unmount()
    # No explicit registration: the package's zarr.chunk_key_encoding entry point is enough.
    a = zarr.open_array(str(tmp_path / "s.zarr" / "temp"))
    assert a.metadata.chunk_key_encoding.name == "offset"
    assert np.array_equal(a[...], np.concatenate([rows, model]))
    assert np.array_equal(zarr.open_group(str(tmp_path / "s.zarr"))["temp"][:2], rows)


def test_a_store_that_is_not_zarr_raises_with_the_daemons_message(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(zarrfs.MountError, match="not a Zarr store"):
        with zarrfs.mount(tmp_path / "empty", tmp_path / "mnt"):
            pass
    with pytest.raises(zarrfs.MountError, match="cache_size"):
        zarrfs.start(tmp_path, tmp_path / "mnt", cache_size="lots")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_a_last_flush_that_fails_raises_from_the_with_block(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        root = zarr.open_group(str(disk / "s.zarr"), mode="w")
        root.create_array("big", shape=(256, 1024), chunks=(16, 1024), dtype="float32", compressors=None, fill_value=0)
        with pytest.raises(zarrfs.UnmountError, match="could not be stored"):
            with zarrfs.mount(disk / "s.zarr", tmp_path / "mnt") as m:
                with open(m.path / "big" / "data", "r+b") as f:
                    f.write(np.random.default_rng(1).random(256 * 1024, dtype="float32").tobytes())
                    # (no fsync: the close stores what fits; the rest waits for the unmount)
        assert not os.path.ismount(tmp_path / "mnt")
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def wait_unmounted(path, seconds=20):
    deadline = time.monotonic() + seconds
    while os.path.ismount(path) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not os.path.ismount(path)


def test_a_mount_still_mapped_after_its_with_block_goes_once_unused(tmp_path):
    model = make_store(tmp_path / "s.zarr")
    with pytest.warns(RuntimeWarning, match="still in use"):
        with zarrfs.mount(tmp_path / "s.zarr", tmp_path / "mnt") as m:
            kept = np.memmap(m.path / "temp" / "data", dtype="<f4", mode="r+", shape=model.shape)
            kept[0] = 5
    # The memmap still works, and the mount stays while it is alive.
    assert os.path.ismount(tmp_path / "mnt") and kept[0, 0] == 5
    kept[5] = 6
    kept.flush()
    del kept
    gc.collect()
    assert wait_unmounted(tmp_path / "mnt"), "the mount outlived its last user"
    model[0], model[5] = 5, 6
    assert np.array_equal(zarr.open_array(str(tmp_path / "s.zarr" / "temp"))[...], model)


def test_a_mount_a_process_kept_mapped_goes_when_the_process_exits(tmp_path):
    model = make_store(tmp_path / "s.zarr")
    script = f"""
import numpy as np, zarrfs
with zarrfs.mount({str(tmp_path / "s.zarr")!r}, {str(tmp_path / "mnt")!r}) as m:
    kept = np.memmap(m.path / "temp" / "data", dtype="<f4", mode="r+", shape={model.shape!r})
kept[1] = 9
kept.flush()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and "still in use" in done.stderr, done.stderr
    assert wait_unmounted(tmp_path / "mnt"), "the mount outlived the process that used it"
    model[1] = 9
    assert np.array_equal(zarr.open_array(str(tmp_path / "s.zarr" / "temp"))[...], model)
