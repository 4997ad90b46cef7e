"""The console's pages (GET): each reads the Models under their lock (kmq.console.views), never the topics, but for
what only the topics hold: a message's payload and story, and a search through payloads and headers, which reads
the newest records first within a budget and says how far it got.

A queue's and a message's page are of one topic set (``set=``: a queue moving between sets is in two, and a message
id is a position in one set's topics); without ``set``, the set the queue lives in. A dead letter is named across
sets as ``SET/PARTITION:OFFSET``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

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
from kmq.topic_sets import TopicSet
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


def served_set(console: Console, name: str) -> TopicSet:
    """The served topic set called ``name``; 404 for another."""
    found = console.models.sets.get(name)
    if found is None:
        raise HTTPException(404, f"topic set {name!r} is not one this console serves "
                                 f"({', '.join(console.models.sets)})")
    return found


def queue_in_set(params: Any, console: Console) -> tuple[str, TopicSet]:
    """The queue a page or an action names (``q``) and the set it is shown in (``set``; without one, the set the
    queue lives in if the console knows it there, else the first set that holds it); 404 for a queue the console
    does not know there."""
    name, wanted = str(params.get("q", "")), str(params.get("set", "") or "")
    with console.models.lock:
        held_in = console.models.sets_of(name)
    if wanted:
        topic_set = served_set(console, wanted)
        if wanted not in held_in:
            raise HTTPException(404, f"no queue {name!r} in topic set {wanted!r}")
        return name, topic_set
    if not held_in:
        raise HTTPException(404, f"no queue {name!r} on the topics the console follows")
    home = console.config.topics_for(name).name
    return name, console.models.sets[home if home in held_in else held_in[0]]


def parse_id(text: str) -> MessageId | None:
    try:
        return MessageId.parse(text.strip())
    except (ValueError, KmqError):
        return None


def overview(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    with console.models.lock:
        data = views.overview(console.models, console.clock())
    return console.render(request, "overview.html", title="Queues", data=data, chart=data.chart)


def queue(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    name, topic_set = queue_in_set(request.query_params, console)
    params = request.query_params
    state = params.get("state", v.WAITING)
    if state not in views.LISTED_STATES:
        raise HTTPException(400, f"unknown state {state!r}")
    now = console.clock()
    with console.models.lock:
        model = console.models[topic_set.name]
        row = views.queue_row(model, name, now, topic_set.name)
        chart = views.chart_data(model.series.chart(name, now))
        counts = {s: model.live.count(name, s) for s in views.LISTED_STATES}
        listed = views.messages(model, name, state, _page(request), console.settings.page_size)
        group = model.workers.groups.get(name)
        purged_before = model.control.purged_before.get(name, 0)
        also_in = [other for other in console.models.sets_of(name) if other != topic_set.name]
    search = _search_messages(request, console, name, topic_set)
    if isinstance(search, Response):
        return search
    controlled, not_served = console.control_sets(name)
    return console.render(request, "queue.html", title=name, queue=name, topic_set=topic_set, row=row, chart=chart,
                          counts=counts, state=state, listed=listed, group=group, purged_before=purged_before,
                          search=search, also_in=also_in, controlled=[s.name for s in controlled],
                          not_served=[s.name for s in not_served])


def _search_messages(request: Request, console: Console, queue_name: str,
                     topic_set: TopicSet) -> dict[str, object] | Response | None:
    """A search of the queue's messages in one set: by id, the message's page; by payload or header, the newest
    matches."""
    params = request.query_params
    text, field = params.get("find", ""), params.get("field", "payload")
    if not text:
        return None
    if field not in SEARCH_FIELDS:
        raise HTTPException(400, f"search by {field!r}? by {', '.join(SEARCH_FIELDS)}")
    model = console.models[topic_set.name]
    if field == "id":
        wanted = parse_id(text)
        if wanted is None:
            raise HTTPException(400, f"{text!r} is not a message id (PARTITION:OFFSET)")
        with console.models.lock:
            key = model.live.key_of(wanted)
        if key is None or key[0] != queue_name:
            return {"text": text, "field": field, "rows": [], "scanned": 0, "further": None}
        return RedirectResponse(url("/message", q=key[0], set=topic_set.name, id=str(key[1])), status_code=303)
    match = _matcher(field, text, queue_name)
    with Reader(console.config, topic_set) as reader:
        found = reader.newest_first(topic_set.messages, match, console.settings.page_size, SEARCH_BUDGET,
                                    _cursors(params.get("from", "")))
    with console.models.lock:
        keys = list(dict.fromkeys(model.live.key_of(_id(r)) or (queue_name, _id(r)) for r in found.records))
        rows = [views.message_row(model, key) for key in keys]
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
    name, topic_set = queue_in_set(request.query_params, console)
    wanted = parse_id(request.query_params.get("id", ""))
    if wanted is None:
        raise HTTPException(400, "a message id is PARTITION:OFFSET")
    model = console.models[topic_set.name]
    with console.models.lock:
        key = model.live.key_of(wanted)
        found = views.message(model, key) if key is not None and key[0] == name else None
    if key is None or found is None:
        raise HTTPException(404, f"no message {wanted} of queue {name!r} in topic set {topic_set.name!r} in what "
                                 "the console read")
    try:
        told, failed = story.read(console.config, topic_set, model, key), ""
    except KmqError as err:  # the broker away: what the console folded is still worth showing
        told, failed = None, str(err)
    view = request.query_params.get("view", "text")
    return console.render(request, "message.html", title=f"{name} {key[1]}", queue=name, topic_set=topic_set,
                          found=found, told=told, failed=failed,
                          view=view if view in ("text", "json", "hex") else "text")


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


def letter_sets(console: Console, params: Any) -> list[str]:
    """The sets a dead-letter filter covers: ``set`` if given, else every served set."""
    name = str(params.get("set", "") or "")
    return [served_set(console, name).name] if name else list(console.models.sets)


def parse_letter_ref(text: str, console: Console) -> tuple[str, MessageId] | None:
    """A dead letter named as ``SET/PARTITION:OFFSET`` (views.letter_ref); a bare ``PARTITION:OFFSET`` is of the
    console's only set. None if it names none."""
    name, _, position = text.strip().rpartition("/")
    if not name and len(console.models.sets) == 1:
        name = next(iter(console.models.sets))
    mid = parse_id(position)
    if mid is None or name not in console.models.sets:
        return None
    return name, mid


def dead_letters(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    params = request.query_params
    wanted = letter_filter(params)
    sets = letter_sets(console, params)
    found: list[tuple[str, MessageId]] | None = None
    scanned = 0
    text, field = params.get("find", ""), params.get("field", "payload")
    if text:  # payloads and headers are on the topics only: read back, newest first, within a budget per set
        if field not in ("payload", "header"):
            raise HTTPException(400, f"search dead letters by {field!r}? by payload or header")
        found = []
        for name in sets:
            topic_set = console.models.sets[name]
            with Reader(console.config, topic_set) as reader:
                scan = reader.newest_first(topic_set.dead_letters, _matcher(field, text, wanted.queue or None),
                                           console.settings.page_size, SEARCH_BUDGET)
            found += [(name, _id(r)) for r in scan.records]
            scanned += scan.scanned
    with console.models.lock:
        listed, waiting = views.letters(console.models, wanted, sets, _page(request), console.settings.page_size)
        if found is not None:
            listed = views.letter_rows(console.models, found)
        counted = Counter[str]()
        for name in sets:
            counted.update(dict(console.models[name].letters.reasons(None)))
        queues = sorted({q for name in sets for q in console.models[name].letters.queues()})
    reasons = sorted(counted.items(), key=lambda item: (-item[1], item[0]))[:20]
    return console.render(request, "dead_letters.html", title="Dead letters", wanted=wanted, listed=listed,
                          waiting=waiting, reasons=reasons, queues=queues, params=dict(params),
                          found=found is not None, scanned=scanned, sets=list(console.models.sets))


def workers(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    now = console.clock()
    with console.models.lock:
        found = [views.health(model, now, topic_set.name, topic_set.tracker_group)
                 for topic_set, model in console.models]
    return console.render(request, "workers.html", title="Workers and trackers", healths=found)


def settings_page(request: Request) -> Response:
    console = console_of(request)
    auth.require_viewer(request, console.settings)
    config = console.config
    shown = {"bootstrap_servers": config.bootstrap_servers, "marker_format": config.marker_format,
             "redelivery_timeout_ms": config.redelivery_timeout_ms}
    users = sorted((u.name, u.role) for u in console.settings.users.values())
    return console.render(request, "settings.html", title="Settings", shown=shown, kafka=config.redacted_kafka(),
                          users=users, sets=list(console.models.sets.values()),
                          other_sets=[s.name for s in config.all_topic_sets if s.name not in console.models.sets],
                          routes=list(config.routes))


def purge_confirm(request: Request) -> Response:
    console = console_of(request)
    asking = auth.who(request)
    if not asking.operator:
        raise HTTPException(403, "purge needs an operator login")
    name, topic_set = queue_in_set(request.query_params, console)
    controlled, not_served = control_sets_of(console, name)
    before_ms = console.clock()
    with console.models.lock:
        held_in = [s for s in controlled if s.name in console.models.sets_of(name)]
        waiting = sum(console.models[s.name].live.count(name, v.WAITING) for s in held_in)
        in_flight = sum(console.models[s.name].live.count(name, state) for s in held_in
                        for state in (v.IN_FLIGHT, v.DELAYED))
    return console.render(request, "confirm_purge.html", title=f"Purge {name}", queue=name, topic_set=topic_set,
                          before_ms=before_ms, waiting=waiting, in_flight=in_flight,
                          controlled=[s.name for s in controlled], not_served=[s.name for s in not_served])


def control_sets_of(console: Console, queue: str) -> tuple[list[TopicSet], list[TopicSet]]:
    """The sets a pause, resume or purge of ``queue`` writes to, and those it may not; 409 when there are none
    (the queue is not read in any set this console serves: its messages here are what a move left)."""
    controlled, not_served = console.control_sets(queue)
    if not controlled:
        raise HTTPException(409, f"queue {queue!r} is read in set(s) {', '.join(s.name for s in not_served)}, none "
                                 "of which this console serves: pause, resume and purge it where they are served "
                                 "(kmq console --set, or kmq pause with that set's credentials)")
    return controlled, not_served


def login_form(request: Request) -> Response:
    return console_of(request).render(request, "login.html", title="Log in", next=request.query_params.get("next", "/"),
                                    error="")


def healthz(request: Request) -> Response:
    console = console_of(request)
    with console.models.lock:
        status = console.models.status
        ok = status.caught_up and not status.error
    # Unauthenticated (for load balancers): says no more than that.
    return PlainTextResponse("ok" if ok else "reading the topics failed" if status.error else "catching up",
                             status_code=200 if ok else 503)

