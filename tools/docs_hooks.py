"""MkDocs hooks (mkdocs.yml, ``hooks:``): the reference pages are completed from the code at build time, so they
cannot drift from it.

- ``<!-- gen:configuration -->`` (docs/configuration.md): every key of ``gatekeeper.config.Settings``, its type, its
  default and its description. The description is the model's, or the longer one in docs/_data/configuration.yaml;
  a key with neither, or a note naming no key, is a warning (a failure under ``--strict``).
- ``<!-- gen:cli -->`` (docs/cli.md): the help of every command of the typer app, walked from its root.
- ``<!-- gen:openapi -->`` (docs/http-api.md): the endpoints of ``gatekeeper.api.app.create_app``'s OpenAPI
  document; the document itself is written to the site as ``openapi.json`` (rendered by the swagger-ui-tag plugin
  from the Swagger UI it ships: no CDN).
- between ``<!-- authority:start -->`` and ``<!-- authority:end -->``: ``gatekeeper.policy.authority.markdown_rows``;
  between ``<!-- notices:start -->`` and ``<!-- notices:end -->``: ``gatekeeper.notices.rules_table`` (the committed
  copies are held equal to the code by tests/policy/test_authority.py and tests/unit/test_notices.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("mkdocs.hooks.gatekeeper")

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "docs" / "_data" / "configuration.yaml"
HELP_COLUMNS = "100"


# ------------------------------------------------------------------------------------------------- configuration


def _type_name(annotation: Any) -> str:
    from pydantic import BaseModel, SecretStr

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"list[{', '.join(_type_name(a) for a in args if a is not Ellipsis)}]"
    if origin is dict:
        return f"dict[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, SecretStr):
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: Any) -> str:
    words = []
    for m in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                words.append(f"{sign} {getattr(m, attr)}")
        for attr, name in (("min_length", "length >="), ("max_length", "length <=")):
            if getattr(m, attr, None) is not None:
                words.append(f"{name} {getattr(m, attr)}")
        if getattr(m, "pattern", None):
            words.append(f"`{m.pattern}`")
    return ", ".join(words)


def _default(field: Any) -> str:
    from pydantic import SecretStr
    from pydantic_core import PydanticUndefined

    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, Path):
        value = str(value)
    return f"`{json.dumps(value)}`"


def _model_of(annotation: Any) -> tuple[type | None, bool]:
    """(the model a field holds, whether as a list of them)."""
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _model_of(args[0])
    if origin in (typing.Union, types.UnionType):
        models = [_model_of(a) for a in args if a is not type(None)]
        return models[0] if len(models) == 1 else (None, False)
    if origin is list and args:
        model, _ = _model_of(args[0])
        return model, model is not None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def configuration_keys() -> list[tuple[str, str, str, str]]:
    """(key, type, default, the model's description) of every leaf key of the settings, in the model's order."""
    from gatekeeper.config import Settings

    rows: list[tuple[str, str, str, str]] = []

    def walk(model: Any, prefix: str) -> None:
        for name, field in model.model_fields.items():
            key = f"{prefix}{name}"
            sub, many = _model_of(field.annotation)
            if sub is not None and not many:
                walk(sub, f"{key}.")
                continue
            if sub is not None:  # a list of entries: its own row, then each entry's keys
                rows.append((key, f"list[{sub.__name__}]", _default(field), field.description or ""))
                walk(sub, f"{key}[].")
                continue
            kind = _type_name(field.annotation)
            bounds = _bounds(field)
            rows.append((key, f"{kind} ({bounds})" if bounds else kind, _default(field), field.description or ""))

    walk(Settings, "")
    return rows


def configuration_notes() -> dict[str, str]:
    data = yaml.safe_load(NOTES.read_text(encoding="utf-8")) or {}
    return {str(k): str(v) for k, v in data.items()}


def configuration_table() -> str:
    keys = configuration_keys()
    notes = configuration_notes()
    known = {k for k, *_ in keys}
    for stale in sorted(set(notes) - known):
        log.warning("docs/_data/configuration.yaml: %s is not a key of gatekeeper.config.Settings", stale)
    out = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, description in keys:
        meaning = notes.get(key) or description
        if not meaning:
            log.warning("configuration key %s has no description (the model's, or docs/_data/configuration.yaml)", key)
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        out.append(f"| `{key}` | {cell(kind)} | {cell(default)} | {cell(meaning)} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------- CLI


def command_paths() -> list[list[str]]:
    """Every command's path from the root (the root itself is ``[]``), groups before their commands."""
    import typer

    from gatekeeper.cli import app

    def walk(path: list[str], cmd: Any) -> list[list[str]]:
        out = [path]
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            if not getattr(sub, "hidden", False):
                out += walk([*path, name], sub)
        return out

    return walk([], typer.main.get_command(app))


def command_help(path: list[str]) -> str:
    from typer.testing import CliRunner

    from gatekeeper.cli import app

    env = {"COLUMNS": HELP_COLUMNS, "TERM": "dumb", "NO_COLOR": "1"}
    result = CliRunner().invoke(app, [*path, "--help"], env=env, prog_name="gatekeeper")
    if result.exit_code != 0:
        log.warning("gatekeeper %s --help exited %s", " ".join(path), result.exit_code)
    return "\n".join(line.rstrip() for line in result.stdout.rstrip().splitlines())


def cli_reference() -> str:
    out = []
    for path in command_paths():
        name = " ".join(["gatekeeper", *path])
        out += [f"### {name}" if path else "### gatekeeper", "", "```text", command_help(path), "```", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------------- OpenAPI


def openapi_document() -> dict[str, Any]:
    from prometheus_client import CollectorRegistry

    from gatekeeper.api.app import create_app
    from gatekeeper.metrics import Metrics

    def probe() -> tuple[bool, dict[str, Any]]:
        return True, {}

    _guarded, app = create_app(Metrics(CollectorRegistry()), probe, probe)
    doc: dict[str, Any] = app.openapi()
    return doc


def openapi_table(doc: dict[str, Any]) -> str:
    out = ["| method | path | what it does |", "|---|---|---|"]
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            summary = (op.get("summary") or op.get("description") or "").strip().splitlines()
            text = (summary[0] if summary else "").replace("|", "\\|")
            out.append(f"| `{method.upper()}` | `{path}` | {text} |")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------------- hooks


def _between(markdown: str, name: str, rows: list[str], keep_header: bool) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in markdown:
        return markdown
    head, rest = markdown.split(start, 1)
    block, tail = rest.split(end, 1)
    lines = [ln for ln in block.strip("\n").splitlines() if ln.strip()]
    new = (lines[:2] if keep_header else []) + rows
    return f"{head}{start}\n" + "\n".join(new) + f"\n{end}{tail}"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- gen:configuration -->" in markdown:
        markdown = markdown.replace("<!-- gen:configuration -->", configuration_table())
    if "<!-- gen:cli -->" in markdown:
        markdown = markdown.replace("<!-- gen:cli -->", cli_reference())
    if "<!-- gen:openapi -->" in markdown:
        markdown = markdown.replace("<!-- gen:openapi -->", openapi_table(openapi_document()))
    if "<!-- authority:start -->" in markdown:
        from gatekeeper.policy.authority import markdown_rows

        markdown = _between(markdown, "authority", markdown_rows(), keep_header=True)
    if "<!-- notices:start -->" in markdown:
        from gatekeeper.notices import rules_table

        markdown = _between(markdown, "notices", rules_table(), keep_header=False)
    return markdown


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    content = json.dumps(openapi_document(), indent=2) + "\n"
    files.append(File.generated(config, "openapi.json", content=content))
    return files


def on_config(config: Any) -> Any:
    # The settings' defaults, and so the page, must not depend on the shell that builds it.
    for name in [n for n in os.environ if re.match(r"^GK_[A-Z]", n)]:
        os.environ.pop(name, None)
    return config
