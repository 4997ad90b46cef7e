"""What every page and action shares: the Console (config, settings, the topic sets it serves and their models,
templates), and the templates' helpers (Jinja2, autoescaped: a payload or header is shown as text, never run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from kmq import wire
from kmq.config import Config
from kmq.console import auth
from kmq.console.model import Models
from kmq.console.settings import Settings
from kmq.topic_sets import TopicSet

HERE = Path(__file__).parent


@dataclass
class Console:
    """What every page and action needs."""

    config: Config
    settings: Settings
    #: A Model per topic set the console serves (``kmq console --set``; default every set of the config).
    models: Models
    templates: Jinja2Templates
    clock: Callable[[], int] = wire.now_ms

    def render(self, request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
        with self.models.lock:
            status = dataclasses.replace(self.models.status)
        base = {"who": auth.who(request), "csrf": auth.csrf_token(request), "settings": self.settings,
                "status": status, "flash": request.session.pop("flash", None), "now_ms": self.clock(),
                "title": "", "many_sets": len(self.models.sets) > 1}
        return self.templates.TemplateResponse(request, name, {**base, **context}, status_code=status_code)

    def control_sets(self, queue: str) -> tuple[list[TopicSet], list[TopicSet]]:
        """The sets a pause, resume or purge of ``queue`` writes to: every set it is read in (its own and, while it
        moves, the one it moves from: as ``kmq pause`` does) that this console serves; and those it is read in that
        this console does not serve (nor may read or write: a tenant's console has its own set's ACLs only)."""
        read_in = self.config.reading_sets(queue)
        return ([s for s in read_in if s.name in self.models.sets],
                [s for s in read_in if s.name not in self.models.sets])

    def home_set(self, queue: str) -> TopicSet | None:
        """The set ``queue`` lives in (where a redrive puts its letters back), if this console serves it."""
        topics = self.config.topics_for(queue)
        return topics if topics.name in self.models.sets else None


def console_of(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


def templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["time"] = _time
    env.filters["age"] = _age
    env.filters["number"] = lambda n: f"{n:,}"
    env.filters["rate"] = lambda r: f"{r:,.1f}/s" if r >= 0.1 else ("0/s" if not r else f"{r * 60:,.1f}/min")
    env.filters["mid"] = str
    env.filters["dict_without"] = lambda d, *keys: {k: v for k, v in d.items() if k not in keys}
    env.globals["url"] = url
    return Jinja2Templates(env=env)


def _time(ms: int | None) -> str:
    if not ms:
        return "—"
    return wire.datetime_from_ms(ms).strftime("%Y-%m-%d %H:%M:%S")


def _age(ms: int | None, now_ms: int) -> str:
    if not ms:
        return "—"
    seconds = max(0, (now_ms - ms) // 1000)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def url(path: str, **params: object) -> str:
    query = urlencode({k: str(v) for k, v in params.items() if v not in (None, "")})
    return f"{path}?{query}" if query else path


def local_path(target: str, default: str = "/") -> str:
    """``target`` if it is a path of this site, else ``default``: a login or an action never sends the browser
    elsewhere ("//host" and "/\\host" name another site)."""
    return target if target.startswith("/") and target[1:2] not in ("/", "\\") else default
