"""Claims the design outgrew, kept from coming back (issue 31, item 5): a module docstring or a page that retells a
part of the design says what the code does now. Each entry names the claim, where it may not appear, and why it is
wrong; the design is told once, in docs/ (the site), and module docstrings link there."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "gatekeeper").rglob("*.py"), *(ROOT / "rwcore").rglob("*.py")])
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

#: (the stale claim, where it is refused, what is true now)
STALE = [
    (
        "writes the whole state document per batch, without compare-and-set",
        SOURCES + PAGES,
        "a conversation is a hash of entries; a batch writes the entries it changed, fenced by the owner epoch",
    ),
    ("the README's verdict table", SOURCES + PAGES, "the verdict and authority tables are on docs/verdicts.md"),
    ("the README's table", SOURCES, "the refusal notices' table is on docs/notices.md"),
    (
        "served on a thread of its own",
        PAGES,
        "gatekeeper run serves its HTTP port from a process of its own (gatekeeper/http_process.py)",
    ),
]


@pytest.mark.parametrize(("claim", "files", "truth"), STALE, ids=[c for c, _, _ in STALE])
def test_the_claim_is_gone(claim: str, files: list[Path], truth: str) -> None:
    found = [str(f.relative_to(ROOT)) for f in files if claim.lower() in " ".join(f.read_text("utf-8").split()).lower()]
    assert found == [], f"{claim!r} is stale ({truth}): {found}"
