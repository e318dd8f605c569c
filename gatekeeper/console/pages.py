"""The console's pages at ``/console``: HTML rendered on the server from Jinja2 templates (autoescaped: what agents
wrote is text, never markup), one style sheet served from the package, and no script at all. The "Now" page
refreshes itself (``<meta http-equiv="refresh">``); every other page changes only when its form is sent.

=======================================  ==============================================================================
page                                     what
=======================================  ==============================================================================
``GET /console``                         Now: per route, lines per second by verdict (the last hour), the reasons, open
                                         handoffs, the next deadlines, the handoffs whose time ran out, the breaker,
                                         readiness
``GET /console/conversation``            ``?route=R&q=X``: the conversation X as a timeline, or the conversations an
                                         item or agent X names
``GET /console/dead-letters``            ``?route=R&reason=&agent=&conversation=&since=``: the newest dead letters,
                                         headers in words; choose some, then dry-run or replay them
``POST /console/dead-letters/replay``    the chosen letters (``letter=P:O``...), ``action=dry-run`` or ``replay``:
                                         needs the ``operator`` scope, a CSRF token and this server as the origin
``GET|POST /console/sign-in``            the token, kept in an HttpOnly, SameSite=Strict cookie
``POST /console/sign-out``
``GET /console/console.css``             the style sheet
=======================================  ==============================================================================

Every answer carries a content security policy that allows nothing but this server's style sheet and images
inline in the page (the chart is an SVG in the HTML): no script runs, no form posts elsewhere, no frame embeds it.
Errors reading Redis or Kafka are shown on the page (503), never as a stack trace.
"""

from __future__ import annotations

import hmac
import logging
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from gatekeeper import __version__
from gatekeeper.config import ConfigError, Route
from gatekeeper.console import access
from gatekeeper.console.history import chart_svg
from gatekeeper.console.letters import LetterFilter
from gatekeeper.console.service import Console
from gatekeeper.console.timeline import build
from gatekeeper.consumers.outcomes import iso

log = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
REFRESH_SECONDS = 10
#: dead letters listed on one page at most (the reader may have read more; the page says so)
MAX_SHOWN = 200


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("gatekeeper.console", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["version"] = __version__
    env.filters["iso"] = lambda t: "" if t is None else iso(t)
    return env


def _since(text: str | None, now: float) -> float | None:
    """``since``: minutes back (``30``), or nothing."""
    if not text:
        return None
    from gatekeeper.replay import parse_when

    try:
        return parse_when(text, now)
    except ValueError:
        return None


def make_router(console: Console) -> APIRouter:
    env = _env()
    router = APIRouter(include_in_schema=False)
    settings = console.settings
    css = resources.files("gatekeeper.console").joinpath("static/console.css").read_bytes()

    def page(name: str, request: Request, status: int = 200, **values: Any) -> HTMLResponse:
        viewer = access.viewer_of(console.book, request.cookies)
        html = env.get_template(name).render(
            viewer=viewer,
            routes=settings.routes,
            path=request.url.path,
            **values,
        )
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def route_of(name: str | None) -> Route | None:
        if not name:
            return settings.routes[0] if len(settings.routes) == 1 else None
        try:
            return settings.route(name)
        except ConfigError:
            return None

    def unavailable(request: Request, what: str, exc: BaseException) -> HTMLResponse:
        """503 saying what did not answer; the error's own words (addresses, topics) only to a signed-in reader."""
        log.warning("a console page could not read %s", what, exc_info=exc)
        signed_in = access.viewer_of(console.book, request.cookies).principal is not None
        why = f"{type(exc).__name__}: {exc}" if signed_in else f"{type(exc).__name__} (sign in for the details)"
        return page("error.html", request, status=503, title="Unavailable", detail=f"{what} did not answer: {why}")

    @router.get("/console/console.css")
    def stylesheet() -> Response:
        return Response(css, media_type="text/css", headers={"cache-control": "max-age=300"})

    @router.get("/console")
    async def now_page(request: Request) -> Response:
        now = console.clock()
        ready, detail = console.readiness() if console.readiness is not None else (True, {})
        try:
            routes = await console.now()
        except Exception as exc:
            return unavailable(request, "Redis or Kafka", exc)
        charts = {
            r.route.input: chart_svg(console.rates.series(r.route.input), since=console.rates.since, now=now)
            for r in routes
        }
        reasons = {r.route.input: console.rates.reasons(r.route.input) for r in routes}
        return page(
            "now.html",
            request,
            title="Now",
            now=now,
            ready=ready,
            ready_detail=detail,
            rows=routes,
            charts=charts,
            reasons=reasons,
            since=console.rates.since,
            sampled=console.worker_metrics is not None,
            refresh=REFRESH_SECONDS,
        )

    @router.get("/console/conversation")
    async def conversation_page(request: Request, route: str | None = None, q: str = "") -> Response:
        chosen = route_of(route)
        q = q.strip()
        if chosen is None or not q:
            return page("search.html", request, title="Conversation", chosen=chosen, q=q, found=None)
        viewer = access.viewer_of(console.book, request.cookies)
        unmask = viewer.may(access.UNMASK)
        try:
            state = await console.conversation(chosen, q)
        except Exception as exc:
            return unavailable(request, "Redis", exc)
        if not state.lines:
            try:
                found = await console.find(chosen, q)
            except Exception as exc:
                return unavailable(request, "Redis or Kafka (searching items and agents)", exc)
            if len(found) == 1 and found[0][0] != q:
                return RedirectResponse(
                    request.url.include_query_params(q=found[0][0]), status_code=303, headers=SECURITY_HEADERS
                )
            return page("search.html", request, title="Conversation", chosen=chosen, q=q, found=found)
        try:
            letters, _ = await console.dead_letters(chosen, unmask=unmask)
            letters = [x for x in letters if x.conversation == q]
            letters_error = None
        except Exception as exc:
            log.warning("the console could not read the dead letters", exc_info=exc)
            letters, letters_error = [], f"{type(exc).__name__}: {exc}"
        timeline = build(chosen, q, state, letters, console.clock(), sensitive=console.sensitive, unmask=unmask)
        return page(
            "conversation.html",
            request,
            title=f"Conversation {q}",
            chosen=chosen,
            q=q,
            timeline=timeline,
            letters_error=letters_error,
            unmasked=unmask,
        )

    @router.get("/console/dead-letters")
    async def letters_page(
        request: Request,
        route: str | None = None,
        reason: str = "",
        agent: str = "",
        conversation: str = "",
        since: str = "",
    ) -> Response:
        chosen = route_of(route)
        if chosen is None:
            return page("letters.html", request, title="Dead letters", chosen=None, letters=[], form={})
        viewer = access.viewer_of(console.book, request.cookies)
        form = {"reason": reason, "agent": agent, "conversation": conversation, "since": since}
        flt = LetterFilter(
            reason.strip() or None,
            agent.strip() or None,
            conversation.strip() or None,
            _since(since.strip(), console.clock()),
        )
        try:
            letters, older = await console.dead_letters(chosen, unmask=viewer.may(access.UNMASK))
        except Exception as exc:
            return unavailable(request, f"Kafka (the topic {chosen.dead_letter})", exc)
        shown = [x for x in letters if flt.matches(x)]
        return page(
            "letters.html",
            request,
            title="Dead letters",
            chosen=chosen,
            letters=shown[:MAX_SHOWN],
            cut=len(shown) > MAX_SHOWN,
            older=older,
            read=len(letters),
            per_partition=console.letters.per_partition,
            form=form,
            reasons=sorted({x.reason for x in letters if x.reason}),
        )

    @router.post("/console/dead-letters/replay")
    async def replay(
        request: Request,
        route: str = Form(...),
        action: str = Form(...),
        csrf: str = Form(""),
        letter: Annotated[list[str] | None, Form()] = None,
    ) -> Response:
        viewer = access.viewer_of(console.book, request.cookies)
        if not access.same_origin(request.headers, request.headers.get("host")) or not access.csrf_ok(viewer, csrf):
            return page(
                "error.html",
                request,
                status=403,
                title="Refused",
                detail="this form did not come from this console's page (origin or CSRF token): reload it",
            )
        if not viewer.may(access.OPERATOR):
            return page(
                "error.html",
                request,
                status=403,
                title="Refused",
                detail="replaying needs a token with the operator scope: sign in with one",
            )
        chosen = route_of(route)
        if chosen is None or action not in ("dry-run", "replay"):
            return page("error.html", request, status=400, title="Bad request", detail="unknown route or action")
        from gatekeeper.replay import parse_letters

        try:
            picked = parse_letters(letter or ())
        except ValueError as exc:
            return page("error.html", request, status=400, title="Bad request", detail=str(exc))
        if not picked:
            return page(
                "error.html", request, status=400, title="Nothing chosen", detail="choose at least one dead letter"
            )
        client = request.client.host if request.client is not None else None
        try:
            report = await console.replay(
                chosen, sorted(picked), dry_run=action == "dry-run", who=viewer.name, client=client
            )
        except Exception as exc:
            return unavailable(request, "the replay (Kafka or Redis)", exc)
        from gatekeeper.replay import masked

        if not viewer.may(access.UNMASK):
            report = masked(report, console.sensitive)
        return page(
            "replayed.html",
            request,
            title="Dry run" if report.dry_run else "Replayed",
            chosen=chosen,
            report=report,
            letters=sorted(picked),
        )

    @router.get("/console/sign-in")
    def sign_in_form(request: Request) -> Response:
        nonce = access.new_login_nonce()
        resp = page("sign_in.html", request, title="Sign in", nonce=access.csrf_token(nonce), failed=False)
        resp.set_cookie(access.LOGIN_COOKIE, nonce, max_age=600, httponly=True, samesite="strict", path="/console")
        return resp

    @router.post("/console/sign-in")
    def sign_in(request: Request, token: str = Form(""), csrf: str = Form("")) -> Response:
        nonce = request.cookies.get(access.LOGIN_COOKIE, "")
        fresh = access.new_login_nonce()
        if not access.same_origin(request.headers, request.headers.get("host")) or not nonce or not csrf:
            ok = False
        else:
            ok = hmac.compare_digest(access.csrf_token(nonce), csrf)
        principal = console.book.principal(f"Bearer {token.strip()}") if ok and token.strip() else None
        if principal is None:
            resp = page(
                "sign_in.html", request, status=401, title="Sign in", nonce=access.csrf_token(fresh), failed=True
            )
            resp.set_cookie(access.LOGIN_COOKIE, fresh, max_age=600, httponly=True, samesite="strict", path="/console")
            return resp
        done = RedirectResponse("/console", status_code=303, headers=SECURITY_HEADERS)
        done.set_cookie(
            access.COOKIE,
            token.strip(),
            max_age=access.SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            path="/console",
            secure=request.url.scheme == "https",
        )
        done.delete_cookie(access.LOGIN_COOKIE, path="/console")
        log.info("console sign-in", extra={"token": principal.name, "scopes": sorted(principal.scopes)})
        return done

    @router.post("/console/sign-out")
    def sign_out(request: Request, csrf: str = Form("")) -> Response:
        viewer = access.viewer_of(console.book, request.cookies)
        if viewer.token is not None and not access.csrf_ok(viewer, csrf):
            return page("error.html", request, status=403, title="Refused", detail="reload the page and try again")
        resp = RedirectResponse("/console", status_code=303, headers=SECURITY_HEADERS)
        resp.delete_cookie(access.COOKIE, path="/console")
        return resp

    return router


__all__ = ["CSP", "make_router"]
