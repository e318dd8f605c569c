"""Approvals with provenance on the real Kafka and Redis (issue 28, attack 5): a record nobody approved, or one
changed after its approver signed it, is never honoured; ``records sign`` and ``records load`` make and check
signed records; a record whose approval a handoff holds is neither superseded nor deleted, and that is alerted."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gatekeeper.approvals import sign_record
from gatekeeper.auth import generate, private_key_text, public_key_text
from gatekeeper.cli import app
from gatekeeper.config import Settings
from gatekeeper.redis_store import Keys
from tests.integration._pipeline import Pipeline, TopicFactory, make_route
from tests.policy.world import HO, RECORD

pytestmark = pytest.mark.integration

FINANCE = generate()
APPROVERS = {
    "require_signed": True,
    "approvers": [{"id": "finance-1", "approver": "finance", "public_key": public_key_text(FINANCE.public_key())}],
}
FORGED_HO = HO.replace("amt=5400.00", "amt=99999.00").replace("40-12-88/61102938", "99-99-99/12345678")


def _config(settings: Settings, tmp_path: Path) -> str:
    path = tmp_path / f"gk-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(json.loads(settings.model_dump_json())))
    return str(path)


def _records_file(tmp_path: Path, **changes: str) -> str:
    path = tmp_path / f"records-{uuid.uuid4().hex[:6]}.json"
    values = {k: v for k, v in RECORD.values.items() if k != "item"}
    path.write_text(json.dumps({RECORD.item: {**values, **changes}}))
    return str(path)


async def _cli(*args: str) -> Any:
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))


async def test_a_record_nobody_approved_or_changed_since_is_never_honoured(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    route = await make_route(topic_factory)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route], records=APPROVERS) as p:
        config = _config(p.settings, tmp_path)
        key_file = tmp_path / "finance.key"
        key_file.write_text(private_key_text(FINANCE))
        key_file.chmod(0o600)
        rec_key = Keys(p.settings.redis.key_prefix).record(RECORD.key)

        # a raw SET with the daemon's (or anyone's) Redis rights: an approval paying 99999.00 to a new account
        forged = {**RECORD.to_dict(), "values": {**RECORD.values, "amt": "99999.00", "acct": "99-99-99/12345678"}}
        await redis_client.set(rec_key, json.dumps(forged))
        await p.send("forged", FORGED_HO)
        got = await p.collect(lambda g: g.count("forged") >= 1)
        (dead,) = got.of("dead", "forged")
        assert dead.h("gk.reason") == "no-record" and "record-unsigned" in (dead.h("gk.problems") or "")
        await redis_client.delete(rec_key)

        # records load refuses unsigned records where signatures are required, and loads the approver's
        unsigned = await _cli("records", "load", _records_file(tmp_path), "-c", config)
        assert unsigned.exit_code == 2 and "not signed by an approver" in unsigned.stderr, unsigned.output
        assert await redis_client.get(rec_key) is None
        signed_path = tmp_path / "signed.jsonl"
        signing = await _cli(
            "records",
            "sign",
            _records_file(tmp_path),
            "--key",
            str(key_file),
            "--id",
            "finance-1",
            "-o",
            str(signed_path),
        )
        assert signing.exit_code == 0, signing.output
        assert json.loads(signed_path.read_text())["signature"].startswith("v1 finance-1 ")
        loaded = await _cli("records", "load", str(signed_path), "-c", config)
        assert loaded.exit_code == 0 and "1 new" in loaded.stdout, loaded.output

        # the approver's signature, kept on a record whose values were changed in Redis afterwards
        stored = json.loads(await redis_client.get(rec_key))
        await redis_client.set(rec_key, json.dumps({**stored, "values": forged["values"]}))
        await p.send("tampered", FORGED_HO)
        got = await p.collect(lambda g: g.count("tampered") >= 1)
        (dead,) = got.of("dead", "tampered")
        assert dead.h("gk.reason") == "no-record" and "record-signature" in (dead.h("gk.problems") or "")

        # the record as approved: the genuine handoff passes
        await redis_client.set(rec_key, json.dumps(stored))
        await p.send("genuine", HO)
        got = await p.collect(lambda g: g.count("genuine") >= 1)
        assert [r.text for r in got.of("output", "genuine")] == [HO]


async def test_a_bound_record_is_neither_superseded_nor_deleted_and_that_is_alerted(
    topic_factory: TopicFactory, kafka_bootstrap: str, redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    route = await make_route(topic_factory)
    async with Pipeline.create(topic_factory, kafka_bootstrap, redis_url, [route], records=APPROVERS) as p:
        config = _config(p.settings, tmp_path)
        await p.store.put_record(sign_record(FINANCE, "finance-1", RECORD))
        await p.send("bound", HO)
        await p.collect(lambda g: len(g.of("output", "bound")) >= 1)

        raised = tmp_path / "raised.jsonl"
        raised.write_text(
            json.dumps(
                {
                    "item": RECORD.item,
                    **{k: v for k, v in sign_record(FINANCE, "finance-1", RECORD).to_dict()["values"].items()},
                    "amt": "7100.00",
                }
            )
        )
        key_file = tmp_path / "finance.key"
        key_file.write_text(private_key_text(FINANCE))
        key_file.chmod(0o600)
        signed = tmp_path / "raised.signed.jsonl"
        assert (
            await _cli("records", "sign", str(raised), "-k", str(key_file), "--id", "finance-1", "-o", str(signed))
        ).exit_code == 0
        superseded = await _cli("records", "load", str(signed), "--supersede", "-c", config)
        assert superseded.exit_code == 1, superseded.output
        assert "refused to supersede item inv:MD-2026-057 ask PAY" in superseded.stderr
        assert f"{route['input']}/bound/scheduler-1" in superseded.stderr
        deleted = await _cli("records", "delete", RECORD.item, "--yes", "-c", config)
        assert deleted.exit_code == 1 and "refused to delete" in deleted.stderr, deleted.output
        (kept,) = await p.store.get_records(RECORD.item, "PAY")
        assert kept.values["amt"] == "5400.00"  # the approval the handoff holds is unchanged

        got = await p.collector.wait(lambda g: len([a for a in g.alerts if a.key == route["input"].encode()]) >= 2)
        alerts = [a.doc for a in got.alerts if a.key == route["input"].encode()]
        assert [(a["alert"], a["operation"]) for a in alerts] == [
            ("record-change-refused", "supersede"),
            ("record-change-refused", "delete"),
        ]
        assert alerts[0]["bound_to"] == f"{route['input']}/bound/scheduler-1" and alerts[0]["item"] == RECORD.item
