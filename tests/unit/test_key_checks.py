"""Keys fail loudly: an empty or malformed keys file, one public key under two agents (or two approvers, or an agent
and an approver), a private key file others may read: each a configuration error at start, naming the file or the
key ids and what to do, never the key material."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gatekeeper.approvals import ApproverRing, check_key_settings
from gatekeeper.auth import KeyRing, generate, private_key_text, public_key_text
from gatekeeper.cli import app
from gatekeeper.config import ConfigError, RecordSettings, SenderAuthSettings, Settings, SigningSettings
from gatekeeper.consumers.loop import Gatekeeper
from gatekeeper.store import MemoryStore
from gatekeeper.verdicts import new_key_pair, signer_for

ROUTE = {"input": "k.in", "output": "k.out", "dead_letter": "k.dlq", "alerts": "k.alerts", "profile": "pay"}
RB = "RB id=1 from=payer to=sched item=INV-1 ask=pay"


def _public() -> str:
    return public_key_text(generate().public_key())


def _keys_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text", ["", "# nobody yet\n", "[]\n", "keys: []\n"])
def test_an_empty_sender_keys_file_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = _keys_file(tmp_path, text)
    with pytest.raises(ConfigError, match=r"sender_auth\.keys_file .*keys\.yaml holds no entry"):
        KeyRing.from_settings(SenderAuthSettings(keys_file=path))


def test_an_empty_sender_keys_file_stops_the_daemon_at_start(tmp_path: Path) -> None:
    path = _keys_file(tmp_path, "")
    settings = Settings.model_validate(
        {"routes": [dict(ROUTE, sender_auth=True)], "sender_auth": {"keys_file": str(path)}}
    )
    with pytest.raises(ConfigError, match="holds no entry"):
        Gatekeeper(settings, store=MemoryStore(), http=False)
    # and `gatekeeper run` says so in one line, exit 2
    config = tmp_path / "gk.yaml"
    config.write_text(yaml.safe_dump(settings.model_dump(mode="json", exclude_defaults=True)))
    r = CliRunner().invoke(app, ["run", "--config", str(config), "--startup-timeout", "0"])
    assert r.exit_code == 2 and "holds no entry" in r.stderr


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("keys: [{id: a-1, agent: a}]\n", "public_key: Field required"),
        ("[{id: a-1, agent: a, public_key: 'bm90IGEga2V5'}]\n", "public_key: Value error, 9 bytes"),
        ("[{id: 'has space', agent: a, public_key: PUB}]\n", "id: String should match pattern"),
        ("keys: {id: a-1}\n", "Input should be a valid list"),
        ("[unclosed\n", "cannot be read: "),
        ("just text\n", "Input should be a valid list"),
        ("{}\n", "Input should be a valid list"),
    ],
)
def test_a_malformed_sender_keys_file_names_the_file_not_the_keys(tmp_path: Path, text: str, says: str) -> None:
    public = _public()
    path = _keys_file(tmp_path, text.replace("PUB", public))
    with pytest.raises(ConfigError, match=r"sender_auth\.keys_file") as caught:
        KeyRing.from_settings(SenderAuthSettings(keys_file=path))
    assert str(path) in str(caught.value) and says in str(caught.value)
    assert public not in str(caught.value)


def test_one_public_key_under_two_agents_is_a_config_error(tmp_path: Path) -> None:
    public = _public()
    path = _keys_file(tmp_path, yaml.safe_dump([{"id": "bob-1", "agent": "bob", "public_key": public}]))
    settings = SenderAuthSettings.model_validate(
        {"keys": [{"id": "alice-1", "agent": "alice", "public_key": public}], "keys_file": str(path)}
    )
    with pytest.raises(ConfigError) as caught:
        KeyRing.from_settings(settings)
    message = str(caught.value)
    assert "alice-1 (agent alice) and bob-1 (agent bob) have the same public key" in message
    assert "gatekeeper keys generate" in message and public not in message
    # the same key under two ids of one agent (a key limited to routes twice) is not two agents' key
    same = [{"id": f"alice-{i}", "agent": "alice", "public_key": public} for i in (1, 2)]
    assert len(KeyRing(SenderAuthSettings.model_validate({"keys": same}).keys)) == 2


def test_one_public_key_under_two_approvers_is_a_config_error(tmp_path: Path) -> None:
    public = _public()
    approvers = [{"id": "fin-1", "approver": "finance", "public_key": public}]
    approvers.append({"id": "ops-1", "approver": "ops", "public_key": public})
    with pytest.raises(ConfigError, match=r"fin-1 \(approver finance\) and ops-1 \(approver ops\) have the same") as c:
        ApproverRing.from_settings(RecordSettings.model_validate({"approvers": approvers}))
    assert public not in str(c.value)


def test_an_empty_approvers_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "approvers.yaml"
    path.write_text("approvers: []\n")
    with pytest.raises(ConfigError, match=r"records\.approvers_file .* holds no entry"):
        ApproverRing.from_settings(RecordSettings(approvers_file=path))


def test_a_key_both_an_agent_s_and_an_approver_s_stops_the_daemon(tmp_path: Path) -> None:
    public = _public()
    settings = Settings.model_validate(
        {
            "routes": [ROUTE],  # no route signs: every configured key is checked all the same
            "sender_auth": {"keys": [{"id": "payer-1", "agent": "payer", "public_key": public}]},
            "records": {"approvers": [{"id": "fin-1", "approver": "finance", "public_key": public}]},
        }
    )
    with pytest.raises(ConfigError) as caught:
        Gatekeeper(settings, store=MemoryStore(), http=False)
    message = str(caught.value)
    assert "sender_auth key id payer-1 (agent payer) and records approver key id fin-1 (approver finance)" in message
    assert public not in message
    # distinct keys: the daemon is built
    other = settings.model_copy(
        update={
            "records": RecordSettings.model_validate(
                {"approvers": [dict(id="fin-1", approver="finance", public_key=_public())]}
            )
        }
    )
    check_key_settings(other)
    Gatekeeper(other, store=MemoryStore(), http=False)


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o640 | 0o020, 0o444, 0o660])
def test_a_signing_key_others_may_read_is_a_config_error(tmp_path: Path, mode: int) -> None:
    pem, _ = new_key_pair()
    path = tmp_path / "gk.pem"
    path.write_bytes(pem)
    path.chmod(mode)
    with pytest.raises(ConfigError) as caught:
        signer_for(SigningSettings(private_key_file=path))
    message = str(caught.value)
    assert f"signing.private_key_file {path}" in message and f"mode {mode:04o}" in message
    assert f"chmod 600 {path}" in message and pem.decode() not in message and "PRIVATE" not in message
    settings = Settings.model_validate({"routes": [ROUTE], "signing": {"private_key_file": str(path)}})
    with pytest.raises(ConfigError, match="chmod 600"):
        Gatekeeper(settings, store=MemoryStore(), http=False)


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o440])
def test_a_signing_key_its_owner_or_its_group_reads_is_taken(tmp_path: Path, mode: int) -> None:
    pem, public = new_key_pair()
    path = tmp_path / "gk.pem"
    path.write_bytes(pem)
    path.chmod(mode)
    signer = signer_for(SigningSettings(private_key_file=path))
    assert signer is not None and signer.public_key == public
    path.chmod(0o644)  # a chmod changes no mtime: the key read before is refused all the same
    with pytest.raises(ConfigError, match="mode 0644"):
        signer_for(SigningSettings(private_key_file=path))


@pytest.mark.parametrize("command", ["keys", "records"])
def test_the_cli_refuses_a_private_key_others_may_read(tmp_path: Path, command: str) -> None:
    key = tmp_path / "mine.key"
    key.write_text(private_key_text(generate()))
    key.chmod(0o644)
    if command == "keys":
        args = ["keys", "sign", "--key", str(key), "--id", "payer-1", "--route", "r", "--conversation", "c", RB]
    else:
        records = tmp_path / "records.json"
        records.write_text('{"item": "inv:1", "ask": "PAY", "amt": "10.00"}\n')
        args = ["records", "sign", str(records), "--key", str(key), "--id", "fin-1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and f"--key {key}" in r.stderr and "chmod 600" in r.stderr
    assert "PRIVATE" not in r.output
    key.chmod(0o600)
    assert CliRunner().invoke(app, args).exit_code == 0
