"""The small HTTP endpoint a worker or tracker serves, and the checks behind it.

- ``/metrics``: Prometheus;
- ``/readyz`` ("route work to me"; ``/healthz`` is the same answer): 200 ``ok`` or 503 and why not: the broker
  unreachable, writes unacknowledged, a member holding no partition while its group needs it;
- ``/livez`` ("restart me" when 503): a loop that stopped turning, a member out of work past the point where a
  restart is the way back.
A degraded answer (``DEGRADED``) is a 200 with something to say (under-replicated partitions, no tracker running).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kmq.errors import KmqError

#: How long a probe's answer is reused: a scraper polling /healthz every second costs one metadata call per 5 s.
PROBE_CACHE_S = 5.0
PROBE_TIMEOUT_S = 2.0
#: Records unacknowledged this long with none acknowledged meanwhile: writes are failing (Starts normally take ms).
STALLED_S = 3.0
#: How often a worker's /healthz asks whether a redelivery tracker runs.
TRACKER_CHECK_S = 30.0
#: A health answer that starts with this is served as 200: working, with something to say (under-replicated).
DEGRADED = "degraded: "
#: How often, while a member holds nothing, its group is asked whether it needs it (a round trip each).
GROUP_CHECK_S = 5.0


class Health(Protocol):
    def __call__(self) -> str | None:
        """None when healthy, else why not (one line); ``DEGRADED`` + why: healthy, but short of what it should be."""


class MetadataClient(Protocol):
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


class Cached:
    """``check()``'s answer, asked again at most every ``every_s`` (a scraper may poll /healthz every second)."""

    def __init__(self, check: Callable[[], str | None], every_s: float, monotonic: Callable[[], float]) -> None:
        self._check = check
        self._every_s = every_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._checked_at = -every_s
        self._answer: str | None = None

    def __call__(self) -> str | None:
        with self._lock:
            if self._monotonic() - self._checked_at >= self._every_s:
                self._answer = self._check()
                self._checked_at = self._monotonic()
            return self._answer


class BrokerProbe:
    """Healthy while the broker answers a metadata request naming ``topic``, the topic exists, each of its partitions
    has a leader, and (given ``stalled``, seconds the client's writes have waited unacknowledged) writes go through:
    while a dead broker is still in the in-sync replicas (until the controller fences it) metadata looks fine and
    every acks=all write waits. Degraded (still 200) while partitions are under-replicated."""

    def __init__(self, client: MetadataClient, topic: str, monotonic: Callable[[], float] = time.monotonic,
                 stalled: Callable[[], float] | None = None) -> None:
        self._client = client
        self._topic = topic
        self._stalled = stalled
        self._cached = Cached(self._check, PROBE_CACHE_S, monotonic)

    def __call__(self) -> str | None:
        stalled_s = self._stalled() if self._stalled is not None else 0.0
        if stalled_s >= STALLED_S:
            return (f"writes to Kafka unacknowledged for {stalled_s:.0f} s (a broker down and not yet fenced, or "
                    "partitions without a leader or without enough in-sync replicas)")
        return self._cached()

    def _check(self) -> str | None:
        try:
            meta = self._client.list_topics(self._topic, timeout=PROBE_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - any failure to answer is "unhealthy", with its text
            kafka_error = err.args[0] if err.args and hasattr(err.args[0], "str") else None
            return f"broker unreachable: {kafka_error.str() if kafka_error is not None else err}"
        info = getattr(meta, "topics", {}).get(self._topic)
        if info is None or getattr(info, "error", None) is not None:
            return f"topic {self._topic!r} does not exist"
        partitions = getattr(info, "partitions", {})
        leaderless = sorted(p for p, pm in partitions.items() if getattr(pm, "leader", 0) < 0)
        if leaderless:
            return f"topic {self._topic!r}: no leader for partitions {leaderless} (leader not available)"
        short = [p for p, pm in partitions.items() if len(getattr(pm, "isrs", ())) < len(getattr(pm, "replicas", ()))]
        if short:
            return (f"{DEGRADED}topic {self._topic!r}: {len(short)} of {len(partitions)} partitions under-replicated "
                    "(a broker is down or catching up)")
        return None


class TrackerPresence:
    """Degraded while no redelivery tracker is in its group: nothing released comes back, nor what a crashed worker
    held. ``members()`` (the tracker group's member count, None when the broker cannot say) is asked at most every
    TRACKER_CHECK_S: describing a group is a round trip to its coordinator."""

    def __init__(self, members: Callable[[], int | None], group: str,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._members = members
        self._group = group
        self._cached = Cached(self._check, TRACKER_CHECK_S, monotonic)

    def __call__(self) -> str | None:
        return self._cached()

    def _check(self) -> str | None:
        if self._members() != 0:  # None (the broker cannot say) is not "missing"
            return None
        return (f"{DEGRADED}no redelivery tracker in group {self._group!r} (released messages and those of crashed "
                "workers do not come back until one runs)")


class Unassigned:
    """Unhealthy once a group member has held no partition for ``bound_s`` and ``needed()`` says why the group needs
    it: None when it does not (a standby: every partition has a member) or cannot say (the broker probe tells that).
    ``needed`` is a round trip to the group coordinator: give it ``Cached`` (every GROUP_CHECK_S)."""

    def __init__(self, held_nothing_for_s: Callable[[], float], needed: Callable[[], str | None],
                 bound_s: float) -> None:
        self._held_nothing_for_s = held_nothing_for_s
        self._needed = needed
        self._bound_s = bound_s

    def __call__(self) -> str | None:
        idle_s = self._held_nothing_for_s()
        if idle_s < self._bound_s:
            return None
        why = self._needed()
        return None if why is None else f"{why}, for {idle_s:.0f} s"


class Pulse:
    """A loop's heartbeat: ``beat()`` each turn; the check says how long it has stood still once past ``bound_s``."""

    def __init__(self, what: str, bound_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._what = what
        self._bound_s = bound_s
        self._monotonic = monotonic
        self._last = monotonic()

    def beat(self) -> None:
        self._last = self._monotonic()

    def __call__(self) -> str | None:
        still_s = self._monotonic() - self._last
        return None if still_s < self._bound_s else f"{self._what} has not turned for {still_s:.0f} s"


def first_problem(*checks: Health) -> str | None:
    """The first check's answer that is not None (an unhealthy one before a degraded one), else None."""
    answers = [answer for check in checks if (answer := check()) is not None]
    return next((a for a in answers if not a.startswith(DEGRADED)), answers[0] if answers else None)


def serve(registry: CollectorRegistry, host: str, port: int, health: Health,
          live: Health | None = None) -> ThreadingHTTPServer:
    """Serves /metrics, /readyz and /healthz (``health``: 200 "ok", or 503 and the reason) and /livez (``live``, or
    always ok) on ``host:port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                body, status, kind = generate_latest(registry), 200, CONTENT_TYPE_LATEST
            elif self.path.startswith(("/healthz", "/readyz", "/livez")):
                check = (live or _always_ok) if self.path.startswith("/livez") else health
                problem = check()
                if problem is None or problem.startswith(DEGRADED):
                    body, status = (b"ok\n" if problem is None else f"ok ({problem})\n".encode()), 200
                else:
                    body, status = f"unhealthy: {problem}\n".encode(), 503
                kind = "text/plain"
            else:
                body, status, kind = b"not found\n", 404, "text/plain"
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the prober gave up waiting (a check can take its probe's timeout): nothing to tell it

        def log_message(self, format: str, *args: object) -> None:
            return

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as err:  # in use, not ours to bind, no such interface: the one line the user needs
        raise KmqError(f"cannot serve metrics on {host}:{port}: {err.strerror or err}") from err
    threading.Thread(target=server.serve_forever, name="kmq-metrics", daemon=True).start()
    return server


def _always_ok() -> str | None:
    return None
