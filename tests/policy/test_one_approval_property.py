"""One approval, one act, as a property (issue 28): whatever an attacker re-produces, wherever and whenever.

Two routes share the records and their bindings, as every route of a deployment does. A genuine payment runs on
``agents.pay`` in ``c1``: the scheduler's handoff, the payer's two-phase tool's statement, the scheduler's clearance,
the act, the done report. Then hypothesis drives an attacker and the clock: any line seen so far re-produced byte for
byte on either route, in either conversation; time passing (past the state's retention, when Redis forgets the
conversations, never the bindings); the payer's tool restarting (a new instance on either route, with the default
ids or with ids that restart at ``payer-1``) and stating the handoff again. Every forwarded clearance reaches every
tool, signed as the daemon signs it. Then:

- the executor ran once, for the genuine statement;
- the gatekeeper forwarded one first (not repeated) clearance: the genuine one. Every other clearance it forwarded
  is a repeat of it, which no tool acts on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatekeeper.consumers.outcomes import Source, Targets, build
from gatekeeper.policy import Decision, RecordKey
from gatekeeper.twophase import Clearance, CommitRefused, Refused, Statement, TwoPhaseTool
from gatekeeper.verdicts import Signer
from tests.policy.world import AN, HO, NOW, RECORD, World, route

TTL = 120.0  # the state's retention: shorter than a statement's window (300 s), so a copy could still clear one
ROUTES = ("agents.pay", "agents.pay2")
CONVERSATIONS = ("c1", "c2")
SIGNER = Signer("gk-1", Ed25519PrivateKey.generate())
KEYS = {"gk-1": SIGNER.public_key}


class Deployment:
    """Two routes' decisions over shared records and bindings, the daemon's signature, the payer's tools."""

    def __init__(self) -> None:
        bindings: dict[RecordKey, str] = {}
        self.worlds = {r: World(policy=route(name=r, state_ttl_seconds=TTL)).add(RECORD) for r in ROUTES}
        for w in self.worlds.values():
            w.bindings = bindings  # one Redis: the approvals and their bindings belong to no route
            w.records = self.worlds[ROUTES[0]].records
        self.last_write: dict[tuple[str, str], float] = {}
        self.now = NOW
        self.acts: list[dict[str, str]] = []
        self.tools: list[tuple[str, TwoPhaseTool, list[Statement]]] = []
        self.seen: list[str] = []  # every line any agent produced: what the attacker can copy
        self.cleared: list[tuple[str, str]] = []  # the statements first (not repeated) clearances named

    def execute(self, values: Any) -> None:
        self.acts.append(dict(values))

    def tool(self, route_name: str, next_id: Callable[[], str] | None = None) -> TwoPhaseTool:
        t = TwoPhaseTool(
            "payer",
            self.execute,
            profile="pay",
            gatekeeper_keys=KEYS,
            route=route_name,
            clock=lambda: self.now,
            next_id=next_id,
        )
        self.tools.append((route_name, t, []))
        return t

    def send(self, line: str, route_name: str, conversation: str) -> Decision:
        world = self.worlds[route_name]
        world.now = self.now
        d = world.send(line, conversation)
        self.last_write[(route_name, conversation)] = self.now
        if line not in self.seen:
            self.seen.append(line)
        if d.forwarded and d.message is not None and d.message.type == "AN":
            if not d.repeated and d.clears is not None:
                self.cleared.append(d.clears)
            self.deliver(d, line, route_name, conversation)
        return d

    def deliver(self, d: Decision, line: str, route_name: str, conversation: str) -> None:
        """The clearance as the daemon produces it to the route's output, handed to every tool on that route for
        every statement it holds (a tool given a record that is not its clearance refuses it)."""
        targets = Targets(output="out", dead_letter="dlq", alerts="al", name=route_name, signer=SIGNER)
        source = Source(topic=route_name, partition=0, offset=0, value=line.encode(), key=conversation.encode())
        (out,) = [o for o in build(d, source, targets, conversation=conversation, now=self.now) if o.topic == "out"]
        clearance = Clearance(out.value, tuple(out.headers))
        for tool_route, t, statements in self.tools:
            if tool_route != route_name:
                continue
            for st_ in list(statements):
                try:
                    dn = t.commit(st_.token, True, clearance=clearance)
                except CommitRefused:
                    continue
                statements.remove(st_)
                self.send(dn, route_name, conversation)

    def prepare(self, t: TwoPhaseTool, route_name: str, conversation: str) -> None:
        try:
            statement = t.prepare(HO, conversation=conversation)
        except Refused:
            return
        for _, tool_, statements in self.tools:
            if tool_ is t:
                statements.append(statement)
        self.send(statement.line, route_name, conversation)

    def expire(self) -> None:
        """Redis forgets a conversation not written for the retention (never a binding)."""
        for (r, c), at in list(self.last_write.items()):
            if self.now - at >= TTL:
                self.worlds[r].states.pop(c, None)
                del self.last_write[(r, c)]


def restarting_ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"payer-{next(counter)}"


ACTIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("copy"),
            st.integers(0, 5),  # where in what was seen the copied run of lines starts
            st.integers(1, 4),  # how many lines, in their order
            st.sampled_from(ROUTES),
            st.sampled_from(CONVERSATIONS),
        ),
        st.tuples(st.just("wait"), st.sampled_from([1.0, 30.0, TTL / 2, TTL])),
        st.tuples(st.just("restart"), st.sampled_from(ROUTES), st.sampled_from(CONVERSATIONS), st.booleans()),
    ),
    max_size=25,
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reuse=st.booleans(), actions=ACTIONS)
def test_an_approval_clears_one_statement_and_acts_once_whatever_is_copied(reuse: bool, actions: list[Any]) -> None:
    dep = Deployment()
    payer = dep.tool("agents.pay", restarting_ids() if reuse else None)
    dep.send(HO, "agents.pay", "c1")
    dep.prepare(payer, "agents.pay", "c1")
    ((_, _, [genuine]),) = [x for x in dep.tools if x[1] is payer]
    an = AN.replace("re=payer-1", f"re={genuine.line.split()[2]}")
    dep.send(an, "agents.pay", "c1")  # the scheduler's one clearance: the act runs, its done report is sent
    assert len(dep.acts) == 1
    first = list(dep.cleared)
    assert len(first) == 1

    for action in actions:
        match action:
            case ("copy", i, n, r, c):
                for line in dep.seen[i : i + n]:
                    dep.send(line, r, c)
            case ("wait", seconds):
                dep.now += seconds
                dep.expire()
            case ("restart", r, c, reuse):
                t = dep.tool(r, restarting_ids() if reuse else None)
                dep.prepare(t, r, c)
        assert len(dep.acts) == 1, f"the approval acted twice after {action}"
        assert dep.cleared == first, f"the approval was cleared again after {action}: {dep.cleared}"
