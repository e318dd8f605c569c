"""Bearer tokens of ``POST /v1/gate``: stored hashed (SHA-256), each allowed to speak for a set of agents.

    tokens:
      - name: payer-service
        sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08   # printf %s "$TOKEN" | sha256sum
        agents: [payer]
        routes: [agents.pay]          # optional; every route when absent
        scopes: [operator]            # optional; none when absent

A request carries ``Authorization: Bearer <token>``. The token is hashed and compared with every configured hash in
constant time; the token itself is never stored, logged or echoed. A line is gated only when its ``from=`` is one of
the token's agents (``"*"``: any) and its route is one of the token's routes: a token for ``payer`` cannot gate a line
``from=scheduler`` (403). Its scopes widen what it sees, never whom it speaks for: without ``operator`` a gate
answer withholds the record's values and the holder of a binding (``gatekeeper.api.redaction``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gatekeeper.config import ApiToken, HttpSettings, load_entries

ANY_AGENT = "*"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request's token speaks for."""

    name: str
    agents: frozenset[str]
    routes: frozenset[str] | None
    scopes: frozenset[str] = frozenset()

    def speaks_for(self, agent: str | None) -> bool:
        if ANY_AGENT in self.agents:
            return True
        return agent is not None and agent in self.agents

    def may_gate(self, route: str) -> bool:
        return self.routes is None or route in self.routes


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token's UTF-8 text: what the configuration stores."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_tokens_file(path: Path) -> list[ApiToken]:
    """The entries of ``http.tokens_file`` (YAML or JSON: a list of token entries). Raises ConfigError."""
    return load_entries(path, ApiToken, "http.tokens_file", "tokens")


class TokenBook:
    """The configured tokens (``http.tokens`` and ``http.tokens_file``)."""

    def __init__(self, tokens: Iterable[ApiToken]) -> None:
        self._entries = [
            (
                bytes.fromhex(t.sha256),
                Principal(
                    t.name,
                    frozenset(t.agents),
                    None if t.routes is None else frozenset(t.routes),
                    frozenset(t.scopes),
                ),
            )
            for t in tokens
        ]

    @classmethod
    def from_settings(cls, http: HttpSettings) -> TokenBook:
        tokens = list(http.tokens)
        if http.tokens_file is not None:
            tokens += load_tokens_file(http.tokens_file)
        return cls(tokens)

    def __len__(self) -> int:
        return len(self._entries)

    def principal(self, authorization: str | None) -> Principal | None:
        """The principal of an ``Authorization`` header's bearer token, or None (missing, malformed, unknown)."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        digest = hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).digest()
        found: Principal | None = None
        for stored, principal in self._entries:  # every entry compared: the time does not tell which matched
            if hmac.compare_digest(stored, digest) and found is None:
                found = principal
        return found


__all__ = ["ANY_AGENT", "Principal", "TokenBook", "hash_token", "load_tokens_file"]
