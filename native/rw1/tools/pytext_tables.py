"""Write (or, with --check, verify) rw1's tables of Python's character classes: src/pytext_tables.rs.

The RW1 grammar is defined by a Python reference: its ``\\d`` and ``str.isdecimal()`` are Unicode's decimal digits,
``str.strip()`` strips Python's whitespace, ``str.lower()`` folds the readback's criteria, and a problem's wording
quotes values with ``repr()``, which escapes what ``str.isprintable()`` refuses. Each depends on the Unicode version
of the Python that runs it (14.0 for 3.11), so rw1 takes its tables from that Python rather than from Rust's (newer)
ones: the same line gets the same verdict.

    python native/rw1/tools/pytext_tables.py           # write the tables
    python native/rw1/tools/pytext_tables.py --check   # exit 1 when they differ from this Python's
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "pytext_tables.rs"


def _ranges(pred: object) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in range(0x110000):
        if pred(chr(cp)):  # type: ignore[operator]
            if out and out[-1][1] == cp - 1:
                out[-1] = (out[-1][0], cp)
            else:
                out.append((cp, cp))
    return out


def _category_ranges(pred: object) -> list[tuple[int, int, str]]:
    """The runs of code points ``pred`` takes, split where the Unicode general category changes."""
    out: list[tuple[int, int, str]] = []
    for cp in range(0x110000):
        if pred(chr(cp)):  # type: ignore[operator]
            cat = unicodedata.category(chr(cp))
            if out and out[-1][1] == cp - 1 and out[-1][2] == cat:
                out[-1] = (out[-1][0], cp, cat)
            else:
                out.append((cp, cp, cat))
    return out


def _rust_escaped(text: str) -> str:
    return "".join(f"\\u{{{ord(c):X}}}" for c in text)


def render() -> str:
    digits = _ranges(str.isdecimal)
    starts = []
    for lo, hi in digits:  # every run of decimal digits is 0-9, in order (checked here)
        for s in range(lo, hi + 1, 10):
            assert all(unicodedata.decimal(chr(s + i)) == i for i in range(10)), hex(s)
            starts.append(s)
    spaces = [lo for lo, hi in _ranges(str.isspace) for lo in range(lo, hi + 1)]
    unprintable = _category_ranges(lambda c: not c.isprintable())
    lower = [(cp, chr(cp).lower()) for cp in range(0x80, 0x110000) if chr(cp).lower() != chr(cp)]
    lines = [
        "// Written by tools/pytext_tables.py from Python "
        f"{sys.version_info.major}.{sys.version_info.minor} (Unicode {unicodedata.unidata_version}): do not edit.",
        "",
        "/// The first code point (the zero) of each run of ten decimal digits (`str.isdecimal`, regex `\\d`).",
        f"pub(crate) static DIGIT_ZEROS: [u32; {len(starts)}] = [",
        *(f"    0x{s:04X}," for s in starts),
        "];",
        "",
        "/// The code points `str.isspace` (and so `str.strip`) takes for whitespace.",
        f"pub(crate) static SPACES: [u32; {len(spaces)}] = [",
        *(f"    0x{s:04X}," for s in spaces),
        "];",
        "",
        "/// The ranges (inclusive) of code points `str.isprintable` refuses (`repr` escapes them), with their",
        "/// general category (`unicodedata.category`): an Other (`C.`) or Separator (`Z.`) one.",
        f"pub(crate) static UNPRINTABLE: [(u32, u32, &str); {len(unprintable)}] = [",
        *(f'    (0x{lo:04X}, 0x{hi:04X}, "{cat}"),' for lo, hi, cat in unprintable),
        "];",
        "",
        "/// The code points beyond ASCII that `str.lower` changes, and what it makes of each (perhaps two).",
        f"pub(crate) static LOWER: [(u32, &str); {len(lower)}] = [",
        *(f'    (0x{cp:04X}, "{_rust_escaped(low)}"),' for cp, low in lower),
        "];",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} differs from this Python's tables: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
