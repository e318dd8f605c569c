"""``python -m rwcore``: the reference command line, on rwcore.

The commands, options, output lines and exit codes are the reference CLI's (``rogerwilco.py``): 0 when valid, 1 when
an error was found (including a line or profile rwcore refuses, printed as ``ERROR: <reason>``), 2 on a usage error.

Where it differs from the reference, on purpose:

- Options belong to their command (``--strict`` to ``validate``, ``--now`` to ``check-thread``...); the reference
  accepts every option on every command and ignores the ones that do not apply. Here they are a usage error (exit 2).
- A missing argument is a usage error (exit 2, argparse's message on stderr); the reference prints
  ``ERROR: list index out of range`` and exits 1.
- ``--help`` prints argparse's help and exits 0; with no arguments at all the help is printed and the exit is 2, as
  the reference does.
- A file ``check-thread`` or ``lint`` cannot read is reported as ``ERROR: <reason>`` with exit 1 (the reference
  exits 1 with a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["main"]

_DESCRIPTION = "RW1 codec and checks (rwcore). Exit status: 0 valid, 1 an error was found, 2 usage error."


def invoked_as(argv0: str | None = None) -> str:
    """The name the command line was invoked as, for its usage lines: ``python -m rwcore`` when run as a module
    (``sys.argv[0]`` is then the path of ``__main__.py``), else the script's name (``sys.argv[0]``'s base name)."""
    name = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    if not name or name in ("__main__.py", "-c"):
        return "python -m rwcore"
    return name


def _parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog or invoked_as(),
        description=_DESCRIPTION,
        epilog="Each command's own --help lists its options. Lines are given as one argument each: quote them.",
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    prof = argparse.ArgumentParser(add_help=False)
    prof.add_argument(
        "--profile",
        metavar="NAME",
        help="validate under this profile (pay, clin, deploy, pform...); default: the core, or the line's own p=",
    )

    def cmd(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[prof], help=help_, description=help_)

    c = cmd("validate", "parse one line; print its errors and warnings, or OK and its JSON form")
    c.add_argument("line", help="the RW1 line")
    c.add_argument("--strict", action="store_true", help="warnings count as errors (exit 1)")

    c = cmd("check-rb", "the five-tier readback check: an RB against its HO")
    c.add_argument("ho", help="the HO line")
    c.add_argument("rb", help="the RB line")
    c.add_argument(
        "--expect-acc", metavar="CRITERIA", help="the sender's withheld criteria, key:value joined by + (tier 4)"
    )

    c = cmd("make-rb", "build the readback a code-side receiver sends for an HO")
    c.add_argument("ho", help="the HO line")
    c.add_argument("rb_id", metavar="RB_ID", help="the readback's id, <receiver>-<n>")
    c.add_argument("--no-hash", action="store_true", help="leave out h= (the HO's digest)")
    c.add_argument("--acc", metavar="CRITERIA", help="the receiver's derived criteria, key:value joined by +")
    c.add_argument("--do", metavar="WHAT", help="what the receiver will produce (rb=plan)")

    c = cmd("check-ho", "before sending: an HO against the record it was built from")
    c.add_argument("ho", help="the HO line")
    c.add_argument("record", help="the record, a JSON object of slot values as written on the line")

    c = cmd("check-dn", "after the act: a done report against the plan")
    c.add_argument("ho", help="the HO line")
    c.add_argument("dn", help="the DN line")
    c.add_argument("--rb", metavar="RB_LINE", help="the readback that passed, part of the plan")

    c = cmd("check-thread", "every handoff closes: DN, UN, FL or an acknowledged CX")
    c.add_argument("file", help="a conversation, one line per message in the order sent")
    c.add_argument("--now", metavar="YYYYMMDDTHHMMZ", help="the time to check expiry against (default: now, UTC)")

    c = cmd("digest", "print the h= value (integrity digest) of a line")
    c.add_argument("line", help="the RW1 line")

    c = cmd("to-json", "print a line's JSON form")
    c.add_argument("line", help="the RW1 line")

    c = cmd("from-json", "print the line for a JSON form")
    c.add_argument("json", help="the JSON form")

    c = cmd("legend", "print the legend an agent needs in its prompt")
    c.add_argument("--lean", action="store_true", help="drop the comprehension-readback keys and unused core asks")

    c = cmd("lint", "check a file, one message per line; report every problem")
    c.add_argument("file", help="the file")
    return p


def _report(problems: Sequence[str], notes: Sequence[str], head: str, ok: str) -> int:
    for x in problems:
        print(f"{head}:", x)
    for n in notes:
        print("NOTE:", n)
    if not problems:
        print(ok)
    return 1 if problems else 0


def _validate(a: argparse.Namespace) -> int:
    from rwcore import parse

    msg, errors, warnings = parse(a.line, a.profile)
    for e in errors:
        print("ERROR:", e)
    for w in warnings:
        print("WARN:", w)
    if not errors:
        print("OK", json.dumps(msg, ensure_ascii=False))
    return 1 if errors or (a.strict and warnings) else 0


def _check_rb(a: argparse.Namespace) -> int:
    from rwcore import check_rb_full

    expect = a.expect_acc.split("+") if a.expect_acc is not None else None
    problems, notes = check_rb_full(a.ho, a.rb, a.profile, expect)
    return _report(problems, notes, "MISMATCH", "OK readback passes; ownership transfers")


def _make_rb(a: argparse.Namespace) -> int:
    from rwcore import make_rb

    acc = a.acc.split("+") if a.acc is not None else None
    print(make_rb(a.ho, a.rb_id, a.profile, with_hash=not a.no_hash, acc=acc, do=a.do))
    return 0


def _check_ho(a: argparse.Namespace) -> int:
    from rwcore import FormError, check_ho

    record = json.loads(a.record)
    if not isinstance(record, dict):
        raise FormError("the record is a JSON object of slot values as written on the line")
    problems, notes = check_ho(a.ho, record, a.profile)
    return _report(problems, notes, "MISMATCH", "OK the HO matches the record; send it")


def _check_dn(a: argparse.Namespace) -> int:
    from rwcore import check_dn

    problems, notes = check_dn(a.ho, a.dn, a.profile, rb_line=a.rb)
    return _report(problems, notes, "MISMATCH", "OK the done report matches the plan")


def _check_thread(a: argparse.Namespace) -> int:
    from rwcore._thread import check_thread

    lines = Path(a.file).read_text().splitlines()
    problems, notes = check_thread(lines, a.profile, a.now)
    return _report(problems, notes, "PROBLEM", "OK every handoff is closed or open in time")


def _digest(a: argparse.Namespace) -> int:
    from rwcore import digest

    print(digest(a.line, a.profile))
    return 0


def _to_json(a: argparse.Namespace) -> int:
    from rwcore import to_json

    print(to_json(a.line, a.profile))
    return 0


def _from_json(a: argparse.Namespace) -> int:
    from rwcore import from_json

    json.loads(a.json)  # not JSON: the reference's error text (JSONDecodeError's), not rwcore's FormError wording
    print(from_json(a.json, a.profile))
    return 0


def _legend(a: argparse.Namespace) -> int:
    from rwcore import legend

    print(legend(a.profile, lean=a.lean))
    return 0


def _lint(a: argparse.Namespace) -> int:
    from rwcore import parse

    bad = 0
    for n, line in enumerate(Path(a.file).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        _, errors, warnings = parse(line, a.profile)
        for e in errors:
            print(f"{a.file}:{n}: ERROR: {e}")
            bad += 1
        for w in warnings:
            print(f"{a.file}:{n}: WARN: {w}")
    print(f"{bad} error(s)")
    return 1 if bad else 0


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "validate": _validate,
    "check-rb": _check_rb,
    "make-rb": _make_rb,
    "check-ho": _check_ho,
    "check-dn": _check_dn,
    "check-thread": _check_thread,
    "digest": _digest,
    "to-json": _to_json,
    "from-json": _from_json,
    "legend": _legend,
    "lint": _lint,
}


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run one command; returns the exit status (0 valid, 1 an error was found, 2 usage error). ``prog``: the name
    it was invoked as, in its usage lines (``gatekeeper rw``); default ``invoked_as()``."""
    from rwcore import FormError

    parser = _parser(prog)
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        parser.print_help()
        return 2
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    if ns.cmd is None:
        parser.print_help()
        return 2
    run: Callable[[argparse.Namespace], int] = _COMMANDS[ns.cmd]
    try:
        return run(ns)
    except (FormError, json.JSONDecodeError, OSError, UnicodeDecodeError) as exc:
        print("ERROR:", exc)
        return 1
