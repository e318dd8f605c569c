"""The Redis load's reading of the ids an entry points at (``redis_store._LOAD_FN``'s ``pointers``), on a real
Redis: for any entry, the ids read off its opening are the ones ``cjson.decode`` of the whole entry gives (what the
load read before). Entries as the engine writes them now (their pointers first), as earlier releases wrote them
(``d`` and ``item`` first), and hostile ones: pointers that are no plain id (quotes, backslashes, other scripts, the
empty string), pointers that are no string, the keys in any order, an entry's text holding a pointer's key, a
pointer's key twice (the decoder keeps the last)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatekeeper.policy import ConversationState
from gatekeeper.redis_store import _LOAD_FN
from tests.fixtures_services import _redis_client

#: each (kind, entry) of ARGV through ``pointers``; a pointer that is no string is nothing to the load (``point``)
DRIVER = """
local out = {}
for x = 1, #ARGV, 2 do
  local a, b = pointers(tonumber(ARGV[x]), ARGV[x + 1])
  out[#out + 1] = {type(a) == 'string' and a or false, type(b) == 'string' and b or false}
end
return out
"""

KEYS = {1: ("re",), 2: ("cleared_by", "passed_rb"), 3: ("ho",)}
ids = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)
pointer = st.one_of(
    ids,
    st.text(max_size=8),
    st.sampled_from(['a"b', "a\\b", "", "x,y", "é", 'x"}']),
    st.none(),
    st.integers(-(2**53), 2**53),
    st.lists(st.integers(0, 9), max_size=2),
)
other = st.dictionaries(
    st.sampled_from(["d", "t", "v", "at", "item", "ask", "exec", "ok", "x", "p"]),
    st.one_of(st.text(max_size=10), st.integers(0, 10**6), st.booleans(), st.none()),
    max_size=4,
)


@st.composite
def entries(draw: st.DrawFn) -> tuple[int, str]:
    """A kind (1 a line, 2 a handoff, 3 a readback) and an entry's text: any keys in any order, or written by the
    engine from such an entry (its own order)."""
    kind = draw(st.sampled_from([1, 2, 3]))
    doc: dict[str, Any] = draw(other)
    for k in KEYS[kind]:
        if draw(st.booleans()) or kind == 3:
            doc[k] = draw(pointer)
    if draw(st.booleans()):  # the keys shuffled, a pointer's key in a text
        items = draw(st.permutations(list(doc.items())))
        doc = dict(items)
        if draw(st.booleans()):
            doc["x"] = '{"re":"q","cleared_by":"q","passed_rb":"q","ho":"q"}'
    raw = orjson.dumps(doc).decode()
    if draw(st.booleans()):
        written = _engine(kind, doc)
        if written is not None:
            raw = written
    if raw != "{}" and draw(st.booleans()):  # a pointer's key again at the end: the decoder keeps the last
        raw = raw[:-1] + "," + orjson.dumps({draw(st.sampled_from(KEYS[kind])): draw(pointer)}).decode()[1:]
    return kind, raw


def _engine(kind: int, doc: dict[str, Any]) -> str | None:
    """The entry as the engine writes it, when it reads one of that shape (None: it does not)."""
    full: dict[str, Any] = {
        1: {"d": "ab", "t": "RB", "v": "forward", "at": 1.5},
        2: {"item": "inv:1", "ask": "PAY", "exec": True},
        3: {"ho": "h-1", "ok": True},
    }[kind]
    full |= {k: v for k, v in doc.items() if k in KEYS[kind] and (v is None or isinstance(v, str))}
    name = {1: "l:x", 2: "o:x", 3: "r:x"}[kind]
    try:
        return ConversationState.from_fields({name: orjson.dumps(full).decode()}).field(name)
    except ValueError:
        return None


def _decoded(kind: int, raw: str) -> list[bytes | None]:
    doc = json.loads(raw)
    got = [doc.get(k) for k in KEYS[kind]] + [None] * (2 - len(KEYS[kind]))
    return [v.encode() if isinstance(v, str) else None for v in got]


async def _read(redis_url: str, cases: list[tuple[int, str]]) -> list[list[bytes | None]]:
    client = _redis_client(redis_url)
    try:
        args = [x for kind, raw in cases for x in (str(kind), raw)]
        return list(await client.eval(_LOAD_FN + DRIVER, 0, *args))
    finally:
        await client.aclose()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases=st.lists(entries(), min_size=1, max_size=20))
def test_the_pointers_read_off_an_entry_are_those_its_decoding_gives(
    redis_url: str, cases: list[tuple[int, str]]
) -> None:
    got = asyncio.run(_read(redis_url, cases))
    assert [list(g) for g in got] == [_decoded(kind, raw) for kind, raw in cases]


def test_the_engine_s_entries_are_read_without_decoding(redis_url: str) -> None:
    """The entries the engine writes open with their pointers, or hold none: each is read without decoding it, which
    a script that cannot decode shows (``cjson`` shadowed by a nil)."""
    line = ConversationState.from_fields({"l:a": '{"d":"x","t":"RB","v":"forward","at":1.0,"re":"h-1"}'})
    ho = ConversationState.from_fields(
        {"o:h": '{"item":"i","ask":"PAY","exec":true,"cleared_by":"r-1","passed_rb":"r-2"}'}
    )
    bare = ConversationState.from_fields({"o:h": '{"item":"i","ask":"PAY","exec":true}'})
    ho_line = ConversationState.from_fields({"l:h": '{"d":"x","t":"HO","v":"forward","at":1.0}'})
    cases = [
        (1, line.field("l:a")),
        (2, ho.field("o:h")),
        (2, bare.field("o:h")),
        (1, ho_line.field("l:h")),
        (3, '{"ho":"h-1","ok":true}'),
    ]
    client = _redis_client(redis_url)

    async def run() -> Any:
        try:
            script = "local cjson = nil\n" + _LOAD_FN + DRIVER  # decoding would fail
            return await client.eval(script, 0, *[x for kind, raw in cases for x in (str(kind), raw)])
        finally:
            await client.aclose()

    assert [list(g) for g in asyncio.run(run())] == [
        [b"h-1", None],
        [b"r-1", b"r-2"],
        [None, None],
        [None, None],
        [b"h-1", None],
    ]
