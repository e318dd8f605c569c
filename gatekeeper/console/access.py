"""Who may do what on the console: reading needs nothing; replaying needs a token with the ``operator`` scope;
seeing sensitive values in full needs one with ``unmask``. The tokens are the API's (``http.tokens``).

An operator signs in by pasting a token into the sign-in form. The console keeps it in a cookie that no script can
read (``HttpOnly``), that a browser sends only to this site's ``/console`` pages and never with a request another
site starts (``SameSite=Strict``), for at most ``SESSION_SECONDS``. The cookie holds the token itself, not a
session of the console's own: every request checks it against the token book again, so removing a token from the
configuration signs its holder out at once, on every instance, and a restart signs nobody out.

Every form that changes something also carries a CSRF token: an HMAC of the signed-in token's hash, which a page of
another site cannot compute (it never sees the cookie). A ``POST`` is refused unless its ``Origin`` (or, without
one, its ``Referer``) is this server, and unless its CSRF token matches. The sign-in form itself carries a CSRF
token of a short-lived cookie, so another site cannot sign a browser in with a token of its choosing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from gatekeeper.api.auth import Principal, TokenBook

COOKIE = "gk_console"
LOGIN_COOKIE = "gk_console_login"
SESSION_SECONDS = 8 * 3600
OPERATOR = "operator"
UNMASK = "unmask"


@dataclass(frozen=True, slots=True)
class Viewer:
    """The reader of a page: anonymous (``principal`` None) or signed in with a token."""

    principal: Principal | None
    token: str | None = None

    @property
    def name(self) -> str:
        return "anonymous" if self.principal is None else self.principal.name

    def may(self, scope: str) -> bool:
        return self.principal is not None and scope in self.principal.scopes

    def csrf(self) -> str:
        """The CSRF token of this viewer's forms ("" when anonymous: an anonymous viewer changes nothing)."""
        return "" if self.token is None else csrf_token(self.token)


def csrf_token(secret: str) -> str:
    key = hashlib.sha256(secret.encode("utf-8", errors="surrogatepass")).digest()
    return hmac.new(key, b"gatekeeper-console-csrf", hashlib.sha256).hexdigest()


def new_login_nonce() -> str:
    return secrets.token_urlsafe(24)


def viewer_of(book: TokenBook, cookies: Mapping[str, str]) -> Viewer:
    token = cookies.get(COOKIE)
    if not token:
        return Viewer(None)
    principal = book.principal(f"Bearer {token}")
    return Viewer(principal, token if principal is not None else None)


def same_origin(headers: Mapping[str, str], host: str | None) -> bool:
    """Whether a POST comes from a page of this server: its ``Origin`` (or ``Referer``) names the ``Host`` it was
    sent to. A browser always sends ``Origin`` on a cross-site POST; a request with neither is refused."""
    source = headers.get("origin") or headers.get("referer")
    if not source or not host or source == "null":
        return False
    return urlsplit(source).netloc.lower() == host.lower()


def csrf_ok(viewer: Viewer, sent: str | None) -> bool:
    return viewer.token is not None and bool(sent) and hmac.compare_digest(viewer.csrf(), sent or "")


__all__ = [
    "COOKIE",
    "LOGIN_COOKIE",
    "OPERATOR",
    "SESSION_SECONDS",
    "UNMASK",
    "Viewer",
    "csrf_ok",
    "csrf_token",
    "new_login_nonce",
    "same_origin",
    "viewer_of",
]
