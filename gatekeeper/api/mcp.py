"""The MCP tools: one per stateless function, on the official SDK's server, served as streamable HTTP at ``/mcp``.

Each tool takes the fields of its endpoint's request model as typed arguments (the same names, types, bounds and
descriptions: ``check_ho(ho, record, profile, detail)``) and answers with the endpoint's own JSON document
(``gatekeeper.api.functions``), as structured content and as its text. A bad argument (an unknown profile, a value
of the wrong type) is a tool error naming it. There is no gate over MCP: deciding a line of a conversation belongs
to the HTTP ``/v1/gate`` with a token, not to a model's tool call.

The server is stateless (every request is answered on its own, no session to keep), with JSON responses, so any
instance behind a load balancer can answer any call.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field, ValidationError

from gatekeeper import __version__
from gatekeeper.api.functions import FUNCTIONS, BadInput, Request, legend
from gatekeeper.api.pool import FunctionPool

INSTRUCTIONS = (
    "The RW1 checks of rogerwilco: check_ho (an HO against the record), check_rb (a readback against the HO, five "
    "tiers), check_dn (a done report against the plan), check_thread (every handoff closes), make_rb, validate, "
    "digest, to_json, from_json, translation (the pay profile's rules) and legend. No problems means go; anything "
    "in problems means stop. These tools are for exploring the format: checks that guard money belong in code."
)

_DESCRIPTIONS = {
    "check-ho": "Check 1, before sending: an HO line against the record it was built from.",
    "check-rb": "Check 2: a readback (or a tool's prepared statement) against the HO: all five tiers and expiry.",
    "check-dn": "Check 3, after the act: a done report against the plan (the HO and the readback that passed).",
    "check-thread": "Every handoff of a conversation closes (DN, UN, FL or an acknowledged CX), none open past exp.",
    "make-rb": "The correct readback line for an HO, as a code-side receiver sends it.",
    "validate": "Parse one line: its errors and warnings, or its JSON twin.",
    "digest": "The h= digest of a line (12 hex characters).",
    "to-json": "A line's JSON twin.",
    "from-json": "The line of a JSON twin, validated.",
    "translation": "The pay profile's translation rules for a line (src=, invoice facts, net + vat = amt).",
}


def _tool(name: str, model: type[Request], pool: FunctionPool) -> Callable[..., Any]:
    """A function whose signature is the request model's fields (the tool's typed input), answered by the function
    ``name`` in the pool's worker processes (``gatekeeper.api.pool``)."""
    params = []
    for field_name, info in model.model_fields.items():
        arg = info.alias or field_name
        kind: Any = info.annotation
        if kind == str | None and not info.is_required():
            # typed str (its default None stays): the SDK parses a string argument that holds JSON into an object
            # unless the argument is exactly str, and from_json's json is a JSON string
            kind = str
        annotation: Any = Annotated[(kind, *info.metadata, Field(description=info.description))]
        default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default))
    params.sort(key=lambda p: p.default is not inspect.Parameter.empty)

    async def call(**kwargs: Any) -> dict[str, Any]:
        try:
            req = model.model_validate({k: v for k, v in kwargs.items() if v is not None})
        except ValidationError as exc:
            raise _tool_error(_validation_text(exc)) from None
        try:
            return await pool.answer(name, req)
        except BadInput as exc:
            raise _tool_error(f"{exc.code}: {exc}") from None

    call.__name__ = name.replace("-", "_")
    call.__doc__ = _DESCRIPTIONS[name]
    call.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    return call


def _tool_error(message: str) -> Exception:
    """An error the SDK reports to the client with its message (any other exception is reported without it)."""
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(x) for x in err["loc"]) or "(arguments)"
        parts.append(f"{loc}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)


def legend_tool(
    profile: Annotated[
        str | None, Field(max_length=64, description="the profile (pay, clin...); none: the core")
    ] = None,
    lean: Annotated[bool, Field(description="drop the comprehension-readback keys and unused core asks")] = False,
) -> dict[str, Any]:
    """The legend another model needs in its prompt to read and write lines under a profile."""
    try:
        return legend(profile, lean)
    except BadInput as exc:
        raise _tool_error(f"{exc.code}: {exc}") from None


def make_mcp_server(pool: FunctionPool | None = None) -> Any:
    """The SDK's MCPServer with every tool registered (not started: ``streamable_http_app`` and its session manager
    are the caller's), the checks answered in ``pool`` (a pool of one process by default; the caller closes it)."""
    from mcp.server.mcpserver import MCPServer

    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)  # MCPServer calls logging.basicConfig: with a handler there, it leaves logging alone
    try:
        server = MCPServer("rogerwilco-gatekeeper", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    finally:
        root.removeHandler(guard)
    pool = pool if pool is not None else FunctionPool(1)
    for name, (model, _fn) in FUNCTIONS.items():
        tool = _tool(name, model, pool)
        server.add_tool(tool, name=tool.__name__, description=_DESCRIPTIONS[name])
    server.add_tool(legend_tool, name="legend", description=legend_tool.__doc__)
    return server


__all__ = ["INSTRUCTIONS", "make_mcp_server"]
