"""The console's pages (GET): each reads the Model under its lock (kmq.console.views), never the topics, but for
what only the topics hold: a message's payload and story, and a search through payloads and headers, which reads
the newest records first within a budget and says how far it got."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import Message as KafkaMessage
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from kmq import _kafka, wire
from kmq.console import auth, story, views
from kmq.console.letters import ANY, REDRIVEN, WAITING, LetterFilter
from kmq.console.topics import Reader
from kmq.console.web import Console, console_of, url
from kmq.errors import KmqError
from kmq.wire import MessageId
from kmq.wire import vocabulary as v

#: Records a search reads back at most per request ("search further" goes on from there).
SEARCH_BUDGET = 200_000
SEARCH_FIELDS = ("id", "payload", "header")


def _page(request: Request) -> int:
    try:
        return max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        return 0


def _queue_name(request: Request, console: Console) -> str:
    name = request.query_params.get("q", "")
    with console.model.lock:
        known = name in console.model.queues()
    if not known:
        raise HTTPException(404, f"no queue {name!r} on the topics the console follows")
    return name


def parse_id(text: str) -> MessageId | None:
    try:
        return MessageId.parse(text.strip())
    except (ValueError, KmqError):
        return None


def overview(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    with console.model.lock:
        data = views.overview(console.model, console.clock())
    return console.render(request, "overview.html", title="Queues", data=data, chart=data.chart)


def queue(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    name = _queue_name(request, console)
    params = request.query_params
    state = params.get("state", v.WAITING)
    if state not in views.LISTED_STATES:
        raise HTTPException(400, f"unknown state {state!r}")
    now = console.clock()
    with console.model.lock:
        model = console.model
        row = views.queue_row(model, name, now)
        chart = views.chart_data(model.series.chart(name, now))
        counts = {s: model.live.count(name, s) for s in views.LISTED_STATES}
        listed = views.messages(model, name, state, _page(request), console.settings.page_size)
        group = model.workers.groups.get(name)
        purged_before = model.control.purged_before.get(name, 0)
    search = _search_messages(request, console, name)
    if isinstance(search, Response):
        return search
    return console.render(request, "queue.html", title=name, queue=name, row=row, chart=chart, counts=counts,
                          state=state, listed=listed, group=group, purged_before=purged_before, search=search)


def _search_messages(request: Request, console: Console, queue_name: str) -> dict[str, object] | Response | None:
    """A search of the queue's messages: by id, the message's page; by payload or header, the newest matches."""
    params = request.query_params
    text, field = params.get("find", ""), params.get("field", "payload")
    if not text:
        return None
    if field not in SEARCH_FIELDS:
        raise HTTPException(400, f"search by {field!r}? by {', '.join(SEARCH_FIELDS)}")
    if field == "id":
        wanted = parse_id(text)
        if wanted is None:
            raise HTTPException(400, f"{text!r} is not a message id (PARTITION:OFFSET)")
        with console.model.lock:
            key = console.model.live.key_of(wanted)
        if key is None or key[0] != queue_name:
            return {"text": text, "field": field, "rows": [], "scanned": 0, "further": None}
        return RedirectResponse(url("/message", q=key[0], id=str(key[1])), status_code=303)
    match = _matcher(field, text, queue_name)
    with Reader(console.config) as reader:
        found = reader.newest_first(console.config.message_topic, match, console.settings.page_size,
                                    SEARCH_BUDGET, _cursors(params.get("from", "")))
    with console.model.lock:
        keys = list(dict.fromkeys(console.model.live.key_of(_id(r)) or (queue_name, _id(r)) for r in found.records))
        rows = [views.message_row(console.model, key) for key in keys]
    further = ",".join(f"{p}:{o}" for p, o in sorted(found.cursors.items())) if found.cursors else None
    return {"text": text, "field": field, "rows": rows, "scanned": found.scanned, "further": further}


def _id(record: KafkaMessage) -> MessageId:
    return MessageId(record.partition() or 0, record.offset() or 0)


def _matcher(field: str, text: str, queue_name: str | None) -> Callable[[KafkaMessage], bool]:
    needle = text.encode()
    key = queue_name.encode() if queue_name is not None else None

    def payload(record: KafkaMessage) -> bool:
        return (key is None or record.key() == key) and needle in (record.value() or b"")

    def header(record: KafkaMessage) -> bool:
        if key is not None and record.key() != key:
            return False
        lowered = text.lower()
        return any(lowered in f"{k}={value.decode('utf-8', 'replace')}".lower()
                   for k, value in _kafka.header_dict(record).items())

    return payload if field == "payload" else header


def _cursors(text: str) -> dict[int, int] | None:
    if not text:
        return None
    try:
        return {int(p): int(o) for p, o in (part.split(":") for part in text.split(","))}
    except ValueError:
        raise HTTPException(400, f"bad search position {text!r}") from None


def message(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    name = _queue_name(request, console)
    wanted = parse_id(request.query_params.get("id", ""))
    if wanted is None:
        raise HTTPException(400, "a message id is PARTITION:OFFSET")
    with console.model.lock:
        key = console.model.live.key_of(wanted)
        found = views.message(console.model, key) if key is not None and key[0] == name else None
    if key is None or found is None:
        raise HTTPException(404, f"no message {wanted} of queue {name!r} in what the console read")
    try:
        told, failed = story.read(console.config, console.model, key), ""
    except KmqError as err:  # the broker away: what the console folded is still worth showing
        told, failed = None, str(err)
    view = request.query_params.get("view", "text")
    return console.render(request, "message.html", title=f"{name} {key[1]}", queue=name, found=found, told=told,
                          failed=failed, view=view if view in ("text", "json", "hex") else "text")


def letter_filter(params: object) -> LetterFilter:
    get = params.get  # type: ignore[attr-defined]
    status = get("status", WAITING)
    if status not in (WAITING, REDRIVEN, ANY):
        raise HTTPException(400, f"unknown status {status!r}")
    return LetterFilter(queue=get("q", "") or "", reason=get("reason", "") or "", from_ms=_ms(get("from_time", "")),
                        to_ms=_ms(get("to_time", "")), status=status,
                        message_id=parse_id(get("id", "")) if get("id", "") else None)


def _ms(text: str | None) -> int | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(400, f"{text!r} is not a time (YYYY-MM-DDTHH:MM, UTC)") from None
    return wire.ms_from_datetime(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


def dead_letters(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    params = request.query_params
    wanted = letter_filter(params)
    found = None
    text, field = params.get("find", ""), params.get("field", "payload")
    if text:  # payloads and headers are on the topic only: read back, newest first, within a budget
        if field not in ("payload", "header"):
            raise HTTPException(400, f"search dead letters by {field!r}? by payload or header")
        with Reader(console.config) as reader:
            found = reader.newest_first(console.config.dlq_topic, _matcher(field, text, wanted.queue or None),
                                        console.settings.page_size, SEARCH_BUDGET)
    with console.model.lock:
        listed, waiting = views.letters(console.model, wanted, _page(request), console.settings.page_size)
        if found is not None:
            listed = views.letter_rows(console.model, [_id(r) for r in found.records])
        reasons = console.model.letters.reasons()
        queues = console.model.letters.queues()
    return console.render(request, "dead_letters.html", title="Dead letters", wanted=wanted, listed=listed,
                          waiting=waiting, reasons=reasons, queues=queues, params=dict(params), found=found)


def workers(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    with console.model.lock:
        found = views.health(console.model, console.clock())
    return console.render(request, "workers.html", title="Workers and trackers", health=found)


def settings_page(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    config = console.config
    shown = {"bootstrap_servers": config.bootstrap_servers, "message_topic": config.message_topic,
             "marker_topic": config.marker_topic, "dead_letter_topic": config.dlq_topic,
             "marker_format": config.marker_format, "redelivery_timeout_ms": config.redelivery_timeout_ms,
             "consumer_group_prefix": config.consumer_group_prefix, "tracker_group": config.tracker_group}
    users = sorted((u.name, u.role) for u in console.settings.users.values())
    return console.render(request, "settings.html", title="Settings", shown=shown, kafka=config.redacted_kafka(),
                          users=users)


def purge_confirm(request: Request) -> Response:
    console = console_of(request)
    asking = auth.who(request)
    if not asking.operator:
        raise HTTPException(403, "purge needs an operator login")
    name = _queue_name(request, console)
    before_ms = console.clock()
    with console.model.lock:
        waiting = console.model.live.count(name, v.WAITING)
        in_flight = console.model.live.count(name, v.IN_FLIGHT) + console.model.live.count(name, v.DELAYED)
    return console.render(request, "confirm_purge.html", title=f"Purge {name}", queue=name, before_ms=before_ms,
                          waiting=waiting, in_flight=in_flight)


def login_form(request: Request) -> Response:
    return console_of(request).render(request, "login.html", title="Log in", next=request.query_params.get("next", "/"),
                                    error="")


def healthz(request: Request) -> Response:
    console = console_of(request)
    with console.model.lock:
        status = console.model.status
        ok = status.caught_up and not status.error
    # Unauthenticated (for load balancers): says no more than that.
    return PlainTextResponse("ok" if ok else "catching up" if not status.caught_up else "reading the topics failed",
                             status_code=200 if ok else 503)

