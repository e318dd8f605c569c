"""The decision, pure: a line, its conversation's state, the records, the route's policy and the time -> a verdict.

Sans-I/O: no Kafka, no Redis, no clock. The daemon, ``gatekeeper check`` and ``gatekeeper replay`` share it.
"""

from gatekeeper.policy.apply import BindingChange, Overlay, apply
from gatekeeper.policy.decide import Prepared, bound_handoff, decide, holder_of, line_digest, prepare, rw_time
from gatekeeper.policy.model import (
    AFFIRMATIVE,
    CHECK_OF_REASON,
    NEGATIVE,
    RESERVED_ID_MAX,
    RESERVED_ID_MIN,
    Decision,
    Mode,
    Reason,
    RecordView,
    RoutePolicy,
    SenderProof,
    Verdict,
)
from gatekeeper.policy.state import ConversationState, HandoffEntry, LineEntry, ReadbackEntry, Record, RecordKey

__all__ = [
    "AFFIRMATIVE",
    "CHECK_OF_REASON",
    "NEGATIVE",
    "RESERVED_ID_MAX",
    "RESERVED_ID_MIN",
    "BindingChange",
    "ConversationState",
    "Decision",
    "HandoffEntry",
    "LineEntry",
    "Mode",
    "Overlay",
    "Prepared",
    "ReadbackEntry",
    "Reason",
    "Record",
    "RecordKey",
    "RecordView",
    "RoutePolicy",
    "SenderProof",
    "Verdict",
    "apply",
    "bound_handoff",
    "decide",
    "holder_of",
    "line_digest",
    "prepare",
    "rw_time",
]
