"""``python -m rwcore`` against the reference CLI: the same output lines and exit codes on the same arguments."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import rogerwilco as rw
from rogerwilco.scripts.rogerwilco import _main as ref_main

from rwcore._cli import main
from tests.rwcore.test_differential import as_rwcore_writes_it

_SUITE = Path(rw.__file__).parent / "tests" / "conformance.jsonl"
CASES = [json.loads(x) for x in _SUITE.read_text().splitlines() if x.strip()]


def _run(fn: object, argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = fn(list(argv))  # type: ignore[operator]
    return rc, out.getvalue()


def _prof(c: dict[str, object]) -> list[str]:
    p = c.get("profile")
    return ["--profile", str(p)] if p else []


HO_PAY = (
    "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 ask=PAY rb=exec sup=marlow amt=5400.00 "
    "cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
HO_ACC = (
    "RW1 HO research-01 from=research to=writer item=gh:crox/site#42 ask=DRAFT due=20261002 rb=acc "
    "keys=len+tone+must+no // hero copy"
)


def _argvs(tmp: Path) -> Iterator[list[str]]:
    for c in CASES:
        k = c["kind"]
        if k == "parse":
            yield ["validate", c["line"], *_prof(c)]
            yield ["validate", c["line"], "--strict", *_prof(c)]
            yield ["to-json", c["line"], *_prof(c)]
            yield ["digest", c["line"], *_prof(c)]
            if "json" in c:
                yield ["from-json", json.dumps(c["json"]), *_prof(c)]
        elif k == "readback":
            extra = ["--expect-acc", c["expect_acc"]] if c.get("expect_acc") else []
            if not c.get("now"):  # the CLI reads the clock; cases pinned to a time are left to the API tests
                yield ["check-rb", c["ho"], c["rb"], *_prof(c), *extra]
        elif k == "presend":
            yield ["check-ho", c["ho"], json.dumps(c["record"]), *_prof(c)]
        elif k == "done":
            extra = ["--rb", c["rb"]] if c.get("rb") else []
            yield ["check-dn", c["ho"], c["dn"], *_prof(c), *extra]
        elif k == "thread":
            f = tmp / f"{c['id']}.rw"
            f.write_text("\n".join(c["lines"]) + "\n")
            yield ["check-thread", str(f), "--now", c["now"], *_prof(c)]
        elif k == "digest":
            yield ["digest", c.get("line") or c.get("ho") or "", *_prof(c)]
    # make-rb, with each option
    yield ["make-rb", HO_PAY, "payer-1", "--profile", "pay"]
    yield ["make-rb", HO_PAY, "payer-1"]
    yield ["make-rb", HO_PAY, "payer-1", "--no-hash"]
    yield ["make-rb", HO_ACC, "writer-01", "--acc", "len:120w+tone:plain", "--do", "copy"]
    yield ["make-rb", HO_ACC, "nobody-01"]  # not <to>-<n>: refused
    yield ["make-rb", "RW1 HO broken", "x-1"]
    # check-ho refusals
    yield ["check-ho", HO_PAY, "[1, 2]", "--profile", "pay"]
    yield ["check-ho", HO_PAY, "{not json", "--profile", "pay"]
    yield ["check-ho", HO_PAY, '{"amt": "5400.01", "acct": "40-12-88/61102983"}', "--profile", "pay"]
    # legends
    for p in ("pay", "clin", "deploy", "pform"):
        yield ["legend", "--profile", p]
        yield ["legend", "--profile", p, "--lean"]
    yield ["legend"]
    yield ["legend", "--lean"]
    yield ["legend", "--profile", "nope"]
    yield ["legend", "--profile", "core"]
    # unknown profiles and bad input
    yield ["validate", HO_PAY, "--profile", "nope"]
    yield ["validate", HO_PAY, "--profile", "core"]
    yield ["validate", HO_PAY, "--profile", "Bad/Name"]
    yield ["to-json", "RW1 HO x", "--profile", "pay"]
    yield ["from-json", "{not json"]
    yield ["from-json", json.dumps({"type": "HO", "id": "a-1", "from": "a", "to": "b", "item": "x", "slots": {}})]
    # lint over a file holding every parse case's line
    lint = tmp / "lint.rw"
    parse_lines = [c["line"] for c in CASES if c["kind"] == "parse" and not c.get("profile")]
    lint.write_text("\n".join(["# comment", "", *parse_lines]) + "\n")
    yield ["lint", str(lint)]
    ok = tmp / "ok.rw"
    ok.write_text(HO_ACC + "\n")
    yield ["lint", str(ok)]
    yield ["check-thread", str(ok), "--now", "20261012T1000Z"]
    yield ["check-thread", str(lint), "--now", "20261012T1000Z"]


# rwcore's pay profile is the one the project was specified with (seeds/003): it names two more agents than the
# reference's copy, so the legend's agent list is the one place their outputs may differ.
_PAY_AGENTS_REF = "Agents: auditor, extractor, human, payer, reconciler, scheduler."
_PAY_AGENTS = "Agents: auditor, coordinator, desk, extractor, human, payer, reconciler, scheduler."


def test_every_case_matches_the_reference(tmp_path: Path) -> None:
    argvs = list(_argvs(tmp_path))
    assert len(argvs) > 200
    diffs = []
    for argv in argvs:
        want = _run(ref_main, argv)
        got = _run(main, argv)
        if argv[0] == "legend" and "pay" in argv:
            want = (want[0], want[1].replace(_PAY_AGENTS_REF, _PAY_AGENTS))
        if argv[0] == "legend" and "--lean" in argv and want[0] == 0:
            want = (want[0], as_rwcore_writes_it(want[1], lean=True))
        if got != want:
            diffs.append((argv, want, got))
    assert not diffs, "\n\n".join(f"{a}\n  ref    {w!r}\n  rwcore {g!r}" for a, w, g in diffs[:10])


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "check-thread" in capsys.readouterr().out
    assert main(["no-such-command"]) == 2
    assert main(["validate"]) == 2  # a missing argument (the reference: ERROR: list index out of range, exit 1)
    assert main(["validate", "RW1 HO x", "--lean"]) == 2  # an option of another command
    assert main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out
    assert main(["check-thread", "--help"]) == 0
    assert "--now" in capsys.readouterr().out


def test_unreadable_file_is_an_error_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-thread", str(tmp_path / "missing.rw")]) == 1
    assert capsys.readouterr().out.startswith("ERROR: ")
    assert main(["lint", str(tmp_path)]) == 1


_ROOT = Path(__file__).resolve().parents[2]


def _python_m(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rwcore", *args], capture_output=True, text=True, check=False, timeout=120, cwd=_ROOT
    )


def test_python_dash_m() -> None:
    line = "RW1 HO research-01 from=research to=writer item=gh:crox/site#42 ask=DRAFT"
    r = _python_m("validate", line)
    assert (r.returncode, r.stdout, r.stderr) == (0, _run(ref_main, ["validate", line])[1], "")
    r = _python_m()
    assert r.returncode == 2, r.stderr
