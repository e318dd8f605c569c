"""The MCP tools through the official SDK's own client, over streamable HTTP at ``/mcp`` on the running server: one
tool per stateless function, typed inputs, and the same answers as the HTTP endpoints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from mcp import Client

from gatekeeper.http import HttpServer
from tests.api.test_functions import SEED_BODY, SEED_HO
from tests.seed import DN, HO, RB, RECORD_VALUES

README = Path(__file__).resolve().parents[2] / "README.md"

TOOLS = {
    "check_ho",
    "check_rb",
    "check_dn",
    "check_thread",
    "make_rb",
    "validate",
    "digest",
    "to_json",
    "from_json",
    "translation",
    "legend",
}


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    doc = result.structured_content
    if isinstance(doc, dict) and set(doc) == {"result"}:
        doc = doc["result"]
    text = json.loads(result.content[0].text)
    assert text == doc  # the text is the same document
    return dict(doc)


async def test_the_tools_answer_as_the_http_endpoints(server: HttpServer, client: httpx.AsyncClient) -> None:
    async with Client(f"{server.url}/mcp") as mcp:
        listed = await mcp.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert set(tools) == TOOLS  # no gate over MCP
        schema = tools["check_ho"].input_schema
        assert set(schema["required"]) == {"ho", "record"}
        assert schema["properties"]["ho"]["type"] == "string"
        assert tools["check_rb"].input_schema["properties"]["now"]["pattern"] == "^[0-9]{8}T[0-9]{4}Z$"

        seed = json.loads(SEED_BODY)
        cases: list[tuple[str, dict[str, Any]]] = [
            ("check-ho", seed),
            ("check-ho", {**seed, "detail": True}),
            ("check-ho", {"profile": "pay", "ho": HO, "record": RECORD_VALUES}),
            ("check-rb", {"profile": "pay", "ho": HO, "rb": RB, "expect_acc": ["len:120w"]}),
            ("check-dn", {"profile": "pay", "ho": HO, "dn": DN, "rb": RB, "detail": True}),
            ("check-thread", {"lines": [HO, RB, DN], "now": "20261001T0900Z"}),
            ("make-rb", {"profile": "pay", "ho": SEED_HO, "id": "payer-1"}),
            ("validate", {"line": HO, "strict": True}),
            ("digest", {"profile": "pay", "line": HO}),
            ("to-json", {"line": HO}),
            ("from-json", {"json": '{"v": "RW1", "type": "ST", "id": "a-1", "from": "a", "to": "b", "item": "x"}'}),
            ("translation", {"profile": "pay", "line": "RW1 ST e-1 from=e to=s item=inv:1 p=pay amt=1.00"}),
        ]
        for name, args in cases:
            http = (await client.post(f"/v1/{name}", json=args)).json()
            got = _structured(await mcp.call_tool(name.replace("-", "_"), args))
            assert got == http, name

        http = (await client.get("/v1/legend", params={"profile": "pay", "lean": "true"})).json()
        assert _structured(await mcp.call_tool("legend", {"profile": "pay", "lean": True})) == http

        # a bad argument is a tool error naming it, as the endpoint's 4xx names it
        bad = await mcp.call_tool("check_ho", {"profile": "nope", "ho": HO, "record": {}})
        assert bad.is_error and "unknown-profile" in bad.content[0].text
        bad = await mcp.call_tool("check_rb", {"ho": HO, "rb": RB, "now": "tomorrow"})
        assert bad.is_error and "now" in bad.content[0].text


def test_the_readmes_python_client_answers_as_shown(server: HttpServer) -> None:
    """The README's MCP example, as written, with ``GK`` set to the server: its output is the one shown."""
    text = README.read_text(encoding="utf-8")
    mcp_section = text[text.index("\n### MCP\n") :]
    code, shown = re.search(r"```python\n(.*?)```\n\n```text\n(.*?)```", mcp_section, re.S).groups()  # type: ignore[union-attr]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "GK": server.url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown
