"""The text view of variable-length arrays (docs/design.md §1), as an independent oracle for the
check scripts and the fixture generator."""


def escape(element, bytes_type):
    """One element as a line: `\\` as `\\\\`, newline `\\n`, carriage return `\\r`, and each
    byte that is not part of valid UTF-8 as `\\xHH` (in `string` arrays only a damaged store
    has such bytes)."""
    raw = element if isinstance(element, bytes) else element.encode()
    out = []
    for ch in raw.decode("utf-8", errors="surrogateescape"):
        if ch == "\\":
            out.append(b"\\\\")
        elif ch == "\n":
            out.append(b"\\n")
        elif ch == "\r":
            out.append(b"\\r")
        elif "\udc80" <= ch <= "\udcff":
            out.append(b"\\x%02x" % (ord(ch) - 0xDC00))
        else:
            out.append(ch.encode())
    return b"".join(out) + b"\n"


def text_view(values, bytes_type):
    """The whole text of elements in C order."""
    return b"".join(escape(v, bytes_type) for v in values)
