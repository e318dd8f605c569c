"""Bounds on the HTTP port's connections: what uvicorn's h11 protocol does not bound by itself.

uvicorn closes a keep-alive connection that stays silent after an answer (``timeout_keep_alive``), and nothing else:
a connection that never sends a byte, one that trickles its headers a byte at a time, or one that announces a body
and never sends it is held for as long as the client likes, each an open file of the daemon's. ``BoundedH11Protocol``
is uvicorn's ``H11Protocol`` with these bounds (hand-written because no server option or well-kept middleware sets
them; an ASGI middleware only sees a request once its head has arrived):

- **idle**: a connection with no request in progress (new, or after an answer) that sends nothing for
  ``idle_seconds`` is closed (uvicorn's keep-alive timer, also armed when the connection is made);
- **read**: from a request's first byte, its head and its body must arrive within ``read_seconds`` (408, then
  closed); a body the application has not asked for yet (reading paused by flow control) does not count against
  the client;
- **connections**: past ``max_connections`` open connections, a new one closes the longest-idle connection with no
  request in progress (one that never made a request first), or itself when every connection is busy: a flood of
  silent connections cannot lock out a probe, and the daemon's open files stay bounded (the worker's Kafka and
  Redis sockets need theirs);
- **keep-alive**: a connection serves at most ``max_requests`` requests, then its last answer says
  ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.flow_control import CLOSE_HEADER
from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    idle_seconds: float = 5.0
    read_seconds: float = 10.0
    max_connections: int = 256
    max_requests: int = 1000


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the bounds of ``ConnectionLimits`` (see the module)."""

    limits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.limits.idle_seconds  # type: ignore[assignment]  # a float works
        self._read_deadline: asyncio.TimerHandle | None = None
        self._requests = 0
        self._counted: Any = None  # the request cycle counted last
        self._idle_since = time.monotonic()

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[BoundedH11Protocol]:
        """A subclass with ``limits`` (uvicorn makes the protocol from a class)."""
        return type("BoundedH11Protocol", (cls,), {"limits": limits})

    # ------------------------------------------------------------------------------------------------ uvicorn's hooks

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._evict_idle():
            self.transport.close()  # every other connection is busy: this one waits for none of them
            return
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._read_deadline is None and self._between_requests():
            self._read_deadline = self.loop.call_later(self.limits.read_seconds, self._read_timed_out)
        super().data_received(data)  # cancels the idle timer
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
            self._cancel_read_deadline()

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and cycle is not self._counted:
            self._counted = cycle
            self._requests += 1
            if self._requests >= self.limits.max_requests:
                cycle.keep_alive = False
                cycle.scope["headers"] = [*cycle.scope["headers"], CLOSE_HEADER]  # answered: Connection: close

    def on_response_complete(self) -> None:
        self._cancel_read_deadline()
        self._idle_since = time.monotonic()
        super().on_response_complete()  # arms the idle timer (uvicorn's keep-alive)

    # ------------------------------------------------------------------------------------------------ the bounds

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_idle(self) -> None:
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(self.limits.idle_seconds, self.timeout_keep_alive_handler)

    def _cancel_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing() or self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED):
            return
        if self.flow.read_paused:  # the application has not read the body yet: not the client's delay
            self._read_deadline = self.loop.call_later(self.limits.read_seconds, self._read_timed_out)
            return
        if self.cycle is None or not self.cycle.response_started:
            self._send_408()
        self.transport.close()

    def _send_408(self) -> None:
        body = b'{"ok": false, "status": 408, "code": "request-timeout", "title": "Request timeout", '
        body += f'"detail": "the request did not arrive within {self.limits.read_seconds:g}s"}}'.encode()
        head = (
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
        )
        self.transport.write(head + body)

    def _idle(self) -> bool:
        return self._read_deadline is None and self._between_requests() and not self.transport.is_closing()

    def _evict_idle(self) -> bool:
        """Close the longest-idle connection with no request in progress, one that never made a request first (a
        client that made some, a prober's keep-alive connection, is kept longest); False when there is none."""
        idle = [c for c in self.connections if c is not self and isinstance(c, BoundedH11Protocol) and c._idle()]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: (c._requests > 0, c._idle_since))
        oldest.timeout_keep_alive_handler()
        self.connections.discard(oldest)
        return True


def protocol_class(limits: ConnectionLimits) -> Any:
    """The protocol class uvicorn's ``Config(http=...)`` takes."""
    return BoundedH11Protocol.with_limits(limits)


__all__ = ["BoundedH11Protocol", "ConnectionLimits", "protocol_class"]
