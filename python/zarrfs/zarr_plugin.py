"""The `offset` chunk key encoding for zarr-python, so that stock zarr-python opens arrays
zarrfs has prepended to.

With zarrfs installed, zarr-python finds it by itself (the `zarr.chunk_key_encoding` entry point
of this package). Where entry points are not read (a vendored zarr, a frozen application),
call `enable()` once before opening the store.

The encoding: the key of grid cell `g` is the `default` key of `g + offset`, e.g.
`{"name": "offset", "configuration": {"offset": [-2, 0], "separator": "/"}}` maps cell (0, 0)
to `c/-2/0`. The specification is docs/offset-encoding.md in the zarrfs repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from zarr.core.chunk_key_encodings import ChunkKeyEncoding

__all__ = ["OffsetChunkKeyEncoding", "enable"]


@dataclass(frozen=True)
class OffsetChunkKeyEncoding(ChunkKeyEncoding):
    """Key of grid cell g = the `default` key of g + offset."""

    name: ClassVar[str] = "offset"
    offset: tuple[int, ...] = ()
    separator: str = "/"

    def __post_init__(self) -> None:
        if isinstance(self.offset, (str, bytes)) or not all(isinstance(o, int) and not isinstance(o, bool) for o in self.offset):
            raise ValueError(f"offset must be a list of integers, not {self.offset!r}")
        object.__setattr__(self, "offset", tuple(self.offset))
        if self.separator not in ("/", "."):
            raise ValueError(f"separator must be '/' or '.', not {self.separator!r}")

    def encode_chunk_key(self, chunk_coords: tuple[int, ...]) -> str:
        if len(chunk_coords) != len(self.offset):
            raise ValueError(f"offset {list(self.offset)} has {len(self.offset)} dimensions, the chunk coordinates {len(chunk_coords)}")
        return self.separator.join(["c", *(str(c + o) for c, o in zip(chunk_coords, self.offset))])

    def decode_chunk_key(self, chunk_key: str) -> tuple[int, ...]:
        if chunk_key == "c":
            return ()
        prefix = "c" + self.separator
        if not chunk_key.startswith(prefix):
            raise ValueError(f"not a chunk key of this encoding: {chunk_key!r}")
        keys = tuple(int(part) for part in chunk_key[len(prefix):].split(self.separator))
        if len(keys) != len(self.offset):
            raise ValueError(f"{chunk_key!r} has {len(keys)} dimensions, the offset {len(self.offset)}")
        return tuple(k - o for k, o in zip(keys, self.offset))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"offset": list(self.offset), "separator": self.separator}}


def enable() -> None:
    """Register the encoding with zarr-python (what the entry point does by itself)."""
    from zarr.registry import register_chunk_key_encoding

    register_chunk_key_encoding("offset", OffsetChunkKeyEncoding)
