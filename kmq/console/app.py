"""The console's web application: Starlette routes over the Model, Jinja2 templates (autoescaped: a payload or header
is shown as text, never run), static files (htmx and uPlot vendored, never fetched), signed-cookie sessions, and
security headers (a Content-Security-Policy that runs only the console's own scripts)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kmq import wire
from kmq.config import Config
from kmq.console import pages
from kmq.console.actions import login, logout, pause, purge, redrive, resume
from kmq.console.model import Models
from kmq.console.settings import Settings
from kmq.console.web import HERE, Console, console_of, templates, url

#: Only the console's own files: no inline script, nothing from elsewhere, never framed.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store")]


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    console = console_of(request)
    if exc.status_code == 401:
        return RedirectResponse(url("/login", next=request.url.path), status_code=303)
    return console.render(request, "error.html", exc.status_code, title="Refused" if exc.status_code == 403 else
                          "Error", message=exc.detail)


def create_app(config: Config, settings: Settings, models: Models,
               clock: Callable[[], int] = wire.now_ms) -> Starlette:
    routes = [
        Route("/", pages.overview),
        Route("/queue", pages.queue),
        Route("/message", pages.message),
        Route("/dead-letters", pages.dead_letters),
        Route("/workers", pages.workers),
        Route("/settings", pages.settings_page),
        Route("/login", pages.login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/queue/pause", pause, methods=["POST"]),
        Route("/queue/resume", resume, methods=["POST"]),
        Route("/queue/purge", pages.purge_confirm, methods=["GET"]),
        Route("/queue/purge", purge, methods=["POST"]),
        Route("/dead-letters/redrive", redrive, methods=["POST"]),
        Route("/healthz", pages.healthz),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(SessionMiddleware, secret_key=settings.session_secret, session_cookie="kmq_console",
                   max_age=12 * 3600, same_site="strict", https_only=settings.secure_cookies),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {HTTPException: _http_error}
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)
    app.state.console = Console(config, settings, models, templates(), clock)
    return app

