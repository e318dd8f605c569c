"""The stateless functions of the HTTP API and the MCP tools: one request model and one function per rwcore function.

Every function takes its request model and returns the answer as a plain dict, the same for HTTP and MCP::

    {"ok": false, "problems": ["record: acct mismatch: record 40-12-88/61102938 vs HO 40-12-88/61102983"], "notes": []}

``problems`` and ``notes`` are the reference's strings, word for word (rwcore's reference-compatible API renders
them). A request with ``"detail": true`` also gets ``detail``: the same findings as data (``code``, ``tier``,
``slot``, ``expected``, ``got``, ``message``), in the same order. The functions that build something add it:
``rb`` (make-rb), ``digest``, ``message`` (to-json, validate: the JSON twin), ``line`` (from-json), ``legend``.

A line rwcore refuses is an answer, not a bad request: ``ok`` false and its reasons in ``problems`` (as the
reference's CLI prints ``ERROR: <reason>``). A bad request (an unknown profile, a value of the wrong type, text that
is not UTF-8) raises :class:`BadInput`, which the HTTP layer turns into a 4xx problem document.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

import rwcore
from rwcore import CheckResult, FormError, Problem
from rwcore._profiles import reference_profile

#: ``YYYYMMDDTHHMMZ``: the clock of check-rb (expiry) and check-thread.
NOW_PATTERN: Final = r"^[0-9]{8}T[0-9]{4}Z$"
#: Bounds that keep one request cheap (the body size limit bounds the rest).
MAX_TEXT: Final = 1_000_000
MAX_LINES: Final = 10_000

PROFILE_EXAMPLE: Final = "pay"
HO_EXAMPLE: Final = (
    "RW1 HO scheduler-1 from=scheduler to=payer item=inv:MD-2026-057 ask=PAY p=pay rb=exec sup=marlow amt=5400.00 "
    "cur=GBP kind=GROSS acct=40-12-88/61102983 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
RECORD_EXAMPLE: Final[dict[str, Any]] = {
    "to": "payer",
    "item": "inv:MD-2026-057",
    "ask": "PAY",
    "sup": "marlow",
    "amt": "5400.00",
    "cur": "GBP",
    "kind": "GROSS",
    "acct": "40-12-88/61102938",
    "paid": "20261002",
    "ref": "MD-2026-057",
    "apref": "FD-0929",
}
RB_EXAMPLE: Final = (
    "RW1 RB payer-1 re=scheduler-1 from=payer to=scheduler item=inv:MD-2026-057 ask=PAY p=pay h=56bb5bca5d3c "
    "sup=marlow amt=5400.00 cur=GBP kind=GROSS acct=40-12-88/61102983 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
DN_EXAMPLE: Final = (
    "RW1 DN payer-2 re=scheduler-1 from=payer to=scheduler item=inv:MD-2026-057 out=OK p=pay sup=marlow amt=5400.00 "
    "cur=GBP kind=GROSS acct=40-12-88/61102983 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
ST_EXAMPLE: Final = "RW1 ST extractor-1 from=extractor to=scheduler item=inv:MD-2026-057 p=pay amt=5400.00 cur=GBP"


class BadInput(ValueError):
    """The request cannot be answered as asked: ``code`` (``unknown-profile``, ``invalid-text``...) and a message."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:  # raised in a worker process of the pool (``api.pool``)
        return (BadInput, (self.code, str(self), self.status))


def problem_document(status: int, code: str, detail: str) -> dict[str, Any]:
    """The problem document of every refusal (``ok`` false, the status, the code, its title, the detail)."""
    return {"ok": False, "status": status, "code": code, "title": code.replace("-", " ").capitalize(), "detail": detail}


def _not_utf8(value: Any, path: str = "") -> str | None:
    """The path of the first string in ``value`` that UTF-8 cannot encode (a lone surrogate), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "(body)"
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _not_utf8(k, path) or _not_utf8(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _not_utf8(v, f"{path}.{i}" if path else str(i))
            if found:
                return found
    return None


Line = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
Profile = Annotated[
    str | None,
    Field(
        max_length=64,
        description="the profile the lines are read under (pay, clin, deploy, pform...); none: the core, or the "
        "line's own p=",
        examples=[PROFILE_EXAMPLE],
    ),
]


class Unicode(BaseModel):
    """A request body whose text is all valid Unicode: a lone surrogate (which JSON can carry) is a 422 naming the
    field, never a line decided or a 500."""

    @model_validator(mode="before")
    @classmethod
    def _utf8(cls, data: Any) -> Any:
        where = _not_utf8(data)
        if where is not None:
            raise ValueError(f"{where}: text that is not valid Unicode (a lone surrogate)")
        return data


class Request(Unicode):
    """What every request carries: the profile, and whether to add the findings as data."""

    model_config = ConfigDict(extra="forbid")

    profile: Profile = None
    detail: bool = Field(False, description="add `detail`: the findings as data (code, tier, slot, expected, got)")


def _criteria(v: Any) -> Any:
    return v.split("+") if isinstance(v, str) else v


Criteria = Annotated[
    list[Annotated[str, Field(max_length=1000)]] | None,
    Field(
        max_length=1000,
        description="criteria as key:value tokens, a list or one string joined by +",
        examples=[["len:120w", "tone:plain"]],
    ),
]


class CheckHoRequest(Request):
    """Check 1, before sending: the HO against the record it was built from."""

    ho: Line = Field(description="the HO line", examples=[HO_EXAMPLE])
    record: dict[str, Any] = Field(
        description="the record: slot values as written on the line", examples=[RECORD_EXAMPLE]
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"profile": "pay", "ho": HO_EXAMPLE, "record": RECORD_EXAMPLE}]},
    )


class CheckRbRequest(Request):
    """Check 2: the readback (or a tool's prepared statement) against the HO, all five tiers and expiry."""

    ho: Line = Field(description="the HO line", examples=[HO_EXAMPLE])
    rb: Line = Field(description="the RB line", examples=[RB_EXAMPLE])
    expect_acc: Criteria = Field(None, description="the sender's withheld criteria (tier 4), key:value tokens")
    now: str | None = Field(None, pattern=NOW_PATTERN, description="the clock for exp=, YYYYMMDDTHHMMZ (UTC)")

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"profile": "pay", "ho": HO_EXAMPLE, "rb": RB_EXAMPLE}]}
    )

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("expect_acc"), str):
            data = {**data, "expect_acc": _criteria(data["expect_acc"])}
        return data


class CheckDnRequest(Request):
    """Check 3, after the act: the done report against the plan (the HO, and the readback that passed)."""

    ho: Line = Field(description="the HO line", examples=[HO_EXAMPLE])
    dn: Line = Field(description="the DN line", examples=[DN_EXAMPLE])
    rb: Line | None = Field(None, description="the readback that passed, part of the plan", examples=[RB_EXAMPLE])

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"profile": "pay", "ho": HO_EXAMPLE, "rb": RB_EXAMPLE, "dn": DN_EXAMPLE}]},
    )


class CheckThreadRequest(Request):
    """Every handoff closes: DN, UN, FL or an acknowledged CX, and none is open past its time."""

    lines: list[Annotated[str, Field(max_length=MAX_TEXT)]] = Field(
        max_length=MAX_LINES, description="the conversation, one line per message in the order sent"
    )
    now: str | None = Field(None, pattern=NOW_PATTERN, description="the clock for expiry, YYYYMMDDTHHMMZ (UTC)")

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"profile": "pay", "lines": [HO_EXAMPLE, RB_EXAMPLE, DN_EXAMPLE], "now": "20261001T0900Z"}]
        },
    )


class MakeRbRequest(Request):
    """The correct readback for an HO, as a code-side receiver sends it."""

    ho: Line = Field(description="the HO line", examples=[HO_EXAMPLE])
    id: str = Field(min_length=1, max_length=200, description="the readback's id, <receiver>-<n>", examples=["payer-1"])
    with_hash: bool = Field(True, description="carry h= (the HO's digest)")
    eta: str | None = Field(None, max_length=200, description="eta=, when the receiver will be done")
    acc: Criteria = Field(None, description="the receiver's derived criteria (rb=acc, rb=plan)")
    do: str | None = Field(None, max_length=1000, description="what the receiver will produce (rb=plan)")

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"profile": "pay", "ho": HO_EXAMPLE, "id": "payer-1"}]}
    )

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("acc"), str):
            data = {**data, "acc": _criteria(data["acc"])}
        return data


class LineRequest(Request):
    """One line."""

    line: Line = Field(description="the RW1 line", examples=[HO_EXAMPLE])

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"profile": "pay", "line": HO_EXAMPLE}]})


class ValidateRequest(LineRequest):
    """Parse one line: its errors and warnings, or its JSON twin."""

    strict: bool = Field(False, description="warnings count as problems")

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"profile": "pay", "line": HO_EXAMPLE}]})


class TranslationRequest(LineRequest):
    """The pay profile's translation rules: an ST about an invoice carries src= and its facts; net + vat = amt."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"profile": "pay", "line": ST_EXAMPLE}]})


class FromJsonRequest(Request):
    """The line of a JSON twin (validated): the twin as an object (``message``) or as a JSON string (``json``)."""

    message: dict[str, Any] | None = Field(None, description="the JSON twin, as an object")
    json_: str | None = Field(None, alias="json", max_length=MAX_TEXT, description="the JSON twin, as a JSON string")

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "message": {
                        "v": "RW1",
                        "type": "ST",
                        "id": "a-1",
                        "from": "a",
                        "to": "b",
                        "item": "gh:crox/site#42",
                        "slots": {"pct": 50},
                    }
                }
            ]
        },
    )

    @model_validator(mode="after")
    def _one(self) -> FromJsonRequest:
        if (self.message is None) == (self.json_ is None):
            raise ValueError("give the twin once: message (an object) or json (a string)")
        return self


# ------------------------------------------------------------------------------------------------ answers


def _profile(name: str | None) -> str | None:
    """The profile name as the reference names it (None or empty: the core). Raises BadInput when unknown."""
    if not name:
        return None
    try:
        reference_profile(name)
    except FormError as exc:
        raise BadInput("unknown-profile", str(exc)) from None
    return name


def _answer(problems: Sequence[Problem], notes: Sequence[Problem], detail: bool, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ok": not problems,
        "problems": [p.message for p in problems],
        "notes": [n.message for n in notes],
    }
    out.update(extra)
    if detail:
        out["detail"] = {"problems": [p.to_dict() for p in problems], "notes": [n.to_dict() for n in notes]}
    return out


def _result(res: CheckResult, detail: bool, **extra: Any) -> dict[str, Any]:
    return _answer(res.problems, res.notes, detail, **extra)


def _refused(exc: FormError, detail: bool, found: Iterable[Problem] = ()) -> dict[str, Any]:
    """A line rwcore refuses: ``ok`` false with the reason, as the reference's CLI prints it."""
    problems = list(found) or [Problem("invalid", str(exc), "form")]
    out = _answer(problems, (), detail)
    out["problems"] = [str(exc)]
    return out


def _parse_errors(line: str, profile: str | None) -> list[Problem]:
    parsed = rwcore.parse_line(line, reference_profile(profile))
    return list(parsed.errors)


def check_ho(req: CheckHoRequest) -> dict[str, Any]:
    return _result(rwcore.check_ho_lines(req.ho, req.record, _profile(req.profile)), req.detail)


def check_rb(req: CheckRbRequest) -> dict[str, Any]:
    res = rwcore.check_rb_lines(req.ho, req.rb, _profile(req.profile), req.expect_acc, req.now)
    return _result(res, req.detail)


def check_dn(req: CheckDnRequest) -> dict[str, Any]:
    return _result(rwcore.check_dn_lines(req.ho, req.dn, _profile(req.profile), rb_line=req.rb), req.detail)


def check_thread(req: CheckThreadRequest) -> dict[str, Any]:
    profile = _profile(req.profile)
    return _result(rwcore.thread_check(req.lines, reference_profile(profile), req.now), req.detail)


def make_rb(req: MakeRbRequest) -> dict[str, Any]:
    profile = _profile(req.profile)
    try:
        rb = rwcore.make_rb(req.ho, req.id, profile, with_hash=req.with_hash, eta=req.eta, acc=req.acc, do=req.do)
    except FormError as exc:
        return _refused(exc, req.detail, _parse_errors(req.ho, profile))
    return _answer((), (), req.detail, rb=rb)


def validate(req: ValidateRequest) -> dict[str, Any]:
    profile = _profile(req.profile)
    message, errors, warnings = rwcore.parse(req.line, profile)
    parsed = rwcore.parse_line(req.line, reference_profile(profile)) if req.detail else None
    p_err = list(parsed.errors) if parsed is not None else [Problem("", e) for e in errors]
    p_warn = list(parsed.warnings) if parsed is not None else [Problem("", w) for w in warnings]
    problems, notes = (p_err + p_warn, []) if req.strict else (p_err, p_warn)
    return _answer(problems, notes, req.detail, message=None if errors else message)


def digest(req: LineRequest) -> dict[str, Any]:
    profile = _profile(req.profile)
    try:
        value = rwcore.digest(req.line, profile)
    except FormError as exc:
        return _refused(exc, req.detail, _parse_errors(req.line, profile))
    return _answer((), (), req.detail, digest=value)


def to_json(req: LineRequest) -> dict[str, Any]:
    profile = _profile(req.profile)
    try:
        text = rwcore.to_json(req.line, profile)
    except FormError as exc:
        return _refused(exc, req.detail, _parse_errors(req.line, profile))
    return _answer((), (), req.detail, message=json.loads(text))


def from_json(req: FromJsonRequest) -> dict[str, Any]:
    profile = _profile(req.profile)
    try:
        if req.json_ is not None:
            line = rwcore.from_json(req.json_, profile)
        else:
            assert req.message is not None
            line = rwcore.encode(req.message, profile)
    except FormError as exc:
        return _refused(exc, req.detail)
    return _answer((), (), req.detail, line=line)


def translation(req: TranslationRequest) -> dict[str, Any]:
    profile = _profile(req.profile)
    parsed = rwcore.parse_line(req.line, reference_profile(profile))
    if parsed.message is None or parsed.errors:
        found = [Problem("line-invalid", f"line: {e.message}", "form", e.slot, None, e.code) for e in parsed.errors]
        return _answer(found, (), req.detail)
    return _answer(rwcore.translation_check(parsed.message, profile), (), req.detail)


def legend(profile: str | None, lean: bool) -> dict[str, Any]:
    name = _profile(profile)
    return {"ok": True, "problems": [], "notes": [], "legend": rwcore.legend(name, lean=lean)}


#: name -> (request model, function): the endpoints and the MCP tools, in the order they are listed.
FUNCTIONS: Final[dict[str, tuple[type[Request], Callable[[Any], dict[str, Any]]]]] = {
    "check-ho": (CheckHoRequest, check_ho),
    "check-rb": (CheckRbRequest, check_rb),
    "check-dn": (CheckDnRequest, check_dn),
    "check-thread": (CheckThreadRequest, check_thread),
    "make-rb": (MakeRbRequest, make_rb),
    "validate": (ValidateRequest, validate),
    "digest": (LineRequest, digest),
    "to-json": (LineRequest, to_json),
    "from-json": (FromJsonRequest, from_json),
    "translation": (TranslationRequest, translation),
}
