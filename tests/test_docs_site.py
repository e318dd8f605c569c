"""The documentation site builds strictly (``mkdocs build --strict``: a broken relative link, a missing page, an
unknown anchor, a configuration key with no description fail it), its generated pages say what the code says, and
neither the site nor the README sends a reader out of the repository."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).with_name("mkdocs")
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GK_")} | {"NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    for page in ("concepts", "configuration", "verdicts", "cli", "http-api", "security", "benchmarks"):
        assert (site / page / "index.html").is_file(), page


def test_the_configuration_page_names_every_key_of_the_settings(site: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    html = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    keys = [key for key, *_ in docs_hooks.configuration_keys()]
    assert len(keys) >= 90
    missing = [key for key in keys if f"<code>{key}</code>" not in html]
    assert missing == []


def test_the_cli_page_has_every_command_s_help(site: Path) -> None:
    html = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for name in ("gatekeeper run", "gatekeeper records load", "gatekeeper keys sign", "gatekeeper redis accept-loss"):
        assert f"Usage: {name} [OPTIONS]" in html, name


def test_the_openapi_document_is_on_the_site_and_rendered_from_local_assets(site: Path) -> None:
    doc = json.loads((site / "openapi.json").read_text(encoding="utf-8"))
    assert "/v1/gate" in doc["paths"] and "/v1/check-ho" in doc["paths"]
    frames = list((site / "http-api").glob("swagger-*.html"))
    assert frames, "no Swagger UI page"
    for frame in frames:
        sources = re.findall(r'(?:src|href)="([^"]+)"', frame.read_text(encoding="utf-8"))
        assert sources and not [s for s in sources if "://" in s or s.startswith("//")], sources


def test_no_page_loads_anything_from_another_site(site: Path) -> None:
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        remote = [s for s in re.findall(r'<(?:script|img|iframe)[^>]* src="([^"]+)"', text) if "://" in s]
        remote += [h for h in re.findall(r'<link rel="(?!canonical)[^"]*"[^>]* href="([^"]+)"', text) if "://" in h]
        assert remote == [], page


def test_the_docs_and_the_readme_link_only_inside_the_repository() -> None:
    """Never to ../shared/ or any file outside the repository; the README's links to the pages resolve."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").rglob("*.yaml"))]
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text, path
        for target in LINK.findall(text):
            if "://" in target or target.startswith("#") or target.startswith("mailto:"):
                continue
            resolved = (path.parent / target.split("#", 1)[0]).resolve()
            if path.parent.name == "_data":  # notes are rendered into docs/configuration.md
                resolved = (ROOT / "docs" / target.split("#", 1)[0]).resolve()
            assert resolved.is_relative_to(ROOT), (path, target)
            if path.name == "README.md" or path.suffix == ".yaml":
                assert resolved.exists(), (path, target)
