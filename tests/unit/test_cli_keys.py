"""``gatekeeper keys generate|sign``: a key pair whose public entry the configuration takes, and a signature the
gatekeeper verifies."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gatekeeper.auth import KeyRing, verify
from gatekeeper.cli import app
from gatekeeper.config import SenderAuthSettings
from tests.seed import RB


def test_generate_then_sign_verifies(tmp_path: Path) -> None:
    key = tmp_path / "payer.key"
    r = CliRunner().invoke(app, ["keys", "generate", "--agent", "payer", "--out", str(key)])
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and "PRIVATE KEY" in key.read_text()
    entries = yaml.safe_load(r.stdout)
    assert entries[0]["id"] == "payer-1" and entries[0]["agent"] == "payer"
    assert "PRIVATE" not in r.stdout
    ring = KeyRing.from_settings(SenderAuthSettings.model_validate({"keys": entries}))

    s = CliRunner().invoke(
        app,
        ["keys", "sign", "--key", str(key), "--id", "payer-1", "--route", "agents.pay", "--conversation", "c-17", RB],
    )
    assert s.exit_code == 0, s.output
    header = s.stdout.strip()
    assert verify(ring, header, "agents.pay", "c-17", RB.encode()).agent == "payer"
    assert verify(ring, header, "agents.pay", "c-18", RB.encode()).failure == "sender-auth-bad-signature"


def test_an_existing_key_file_is_never_overwritten(tmp_path: Path) -> None:
    key = tmp_path / "payer.key"
    key.write_text("mine")
    r = CliRunner().invoke(app, ["keys", "generate", "--agent", "payer", "--out", str(key)])
    assert r.exit_code == 2 and "not overwritten" in r.stderr and key.read_text() == "mine"
