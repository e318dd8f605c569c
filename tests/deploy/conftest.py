"""The operator kit's tools for the deploy tests: built by ``deploy/tools/install.sh`` (pinned sources, cached).

A tool that cannot be built fails the tests that need it; they never skip (a chart test that did not run is not a
chart that passed).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "deploy" / "tools" / "install.sh"


def install_tools(*tools: str) -> dict[str, Path]:
    """``deploy/tools/install.sh TOOL...``, then each tool's path. Fails the test (never skips) when it cannot."""
    try:
        proc = subprocess.run(
            ["bash", str(INSTALL), *tools], cwd=REPO, capture_output=True, text=True, timeout=3600, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"deploy/tools/install.sh {' '.join(tools)} did not finish in an hour", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(
            f"deploy/tools/install.sh {' '.join(tools)} exited {proc.returncode}:\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    folder = Path(
        subprocess.run(["bash", str(INSTALL), "--path"], capture_output=True, text=True, check=True).stdout.strip()
    )
    paths = {tool: folder / tool for tool in tools}
    for path in paths.values():
        if not os.access(path, os.X_OK):
            pytest.fail(f"deploy/tools/install.sh reported success but {path} is not there", pytrace=False)
    return paths


@pytest.fixture(scope="session")
def chart_tools() -> dict[str, Path]:
    """helm and kubevalidate, built once per session."""
    return install_tools("helm", "kubevalidate")


@pytest.fixture(scope="session")
def helm(chart_tools: dict[str, Path]) -> Path:
    return chart_tools["helm"]


@pytest.fixture(scope="session")
def kubevalidate(chart_tools: dict[str, Path]) -> Path:
    return chart_tools["kubevalidate"]


@pytest.fixture(scope="session")
def promtool() -> Path:
    return install_tools("promtool")["promtool"]


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    return install_tools("prometheus")["prometheus"]
