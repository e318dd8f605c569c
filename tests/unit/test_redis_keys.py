"""The Redis key layout of a conversation and of a record, as the store's module docstring gives it."""

from __future__ import annotations

from gatekeeper.policy import RecordKey
from gatekeeper.redis_store import Keys


def test_a_conversations_keys_are_its_state_its_document_and_its_queue() -> None:
    keys = Keys("gk")
    tag = "agents%2Fpay/conv%7B1%7D"  # the route's slash and the conversation's braces escaped
    assert keys.conversation("agents/pay", "conv{1}") == (f"gk:cs:{{{tag}}}", f"gk:conv:{{{tag}}}", f"gk:gc:{{{tag}}}")
    assert keys.state("agents/pay", "conv{1}") == f"gk:cs:{{{tag}}}"
    assert keys.conv("agents/pay", "conv{1}") == f"gk:conv:{{{tag}}}"
    assert keys.queue("agents/pay", "conv{1}") == f"gk:gc:{{{tag}}}"
    # memoised by prefix too: another store's keys are its own
    assert Keys("other").state("agents/pay", "conv{1}") == f"other:cs:{{{tag}}}"


def test_a_records_keys_share_its_items_tag() -> None:
    keys = Keys("gk")
    assert keys.record(RecordKey("inv:{odd}", "PAY")) == "gk:rec:{inv:%7Bodd%7D}:PAY"
    assert keys.binding(RecordKey("inv:{odd}", "PAY")) == "gk:bind:{inv:%7Bodd%7D}:PAY"
