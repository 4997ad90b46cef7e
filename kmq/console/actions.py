"""The console's actions (POST): log in and out, pause and resume, purge, redrive. Each action needs an operator
login and the session's CSRF token (kmq.console.auth), is written through kmq's own writers (the control topic,
kmq.ops.dlq), and is logged with who did it. A bulk action runs only with the count its confirmation showed:
when the count changed since, the confirmation is shown again with the new one."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import structlog
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from kmq import wire
from kmq.console import auth, topics, views
from kmq.console.letters import ANY, Letter, LetterFilter
from kmq.console.model import Model
from kmq.console.pages import control_sets_of, letter_filter, letter_sets, parse_letter_ref, queue_in_set
from kmq.console.web import Console, console_of, local_path, url
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


def _back(request: Request, location: str, flash: str) -> Response:
    request.session["flash"] = flash
    return RedirectResponse(location, status_code=303)


async def _queue(request: Request, console: Console) -> tuple[FormData, str, str, list[TopicSet], str]:
    """The form, the queue it names, the page to go back to, the sets the action writes to, and a note on the sets
    it is read in that this console does not serve (it writes nothing there)."""
    form = await request.form()
    name, shown_in = queue_in_set(form, console)
    controlled, not_served = control_sets_of(console, name)
    note = ""
    if not_served:
        note = (f" Not in set(s) {', '.join(s.name for s in not_served)}, where it is read too: this console does "
                "not serve them.")
    elif len(controlled) > 1:
        note = f" Written to the control topics of sets {', '.join(s.name for s in controlled)}."
    return form, name, url("/queue", q=name, set=shown_in.name), controlled, note


async def login(request: Request) -> Response:
    console = console_of(request)
    await auth.check_csrf(request, "log in")
    form = await request.form()
    name, secret = str(form.get("user", "")), str(form.get("password", ""))
    target = local_path(str(form.get("next", "/")))
    user = console.settings.users.get(name)
    if not await run_in_threadpool(auth.check, user, secret):
        log.warning("console_login_failed", user=name, client=auth.who(request).client)
        return console.render(request, "login.html", 401, title="Log in", next=target,
                              error="Unknown user, or wrong password or token.")
    assert user is not None
    auth.log_in(request, user)
    log.info("console_login", user=user.name, role=user.role, client=auth.who(request).client)
    return _back(request, target, f"Logged in as {user.name} ({user.role}).")


async def logout(request: Request) -> Response:
    await auth.check_csrf(request, "log out")
    log.info("console_logout", user=str(auth.who(request)))
    auth.log_out(request)
    return RedirectResponse("/", status_code=303)


async def pause(request: Request) -> Response:
    console = console_of(request)
    asking = await auth.require_operator(request, "pause")
    form, name, back, sets, note = await _queue(request, console)
    until_text = str(form.get("until", "")).strip()
    until_ms = None
    if until_text:
        try:
            moment = datetime.fromisoformat(until_text)
        except ValueError:
            raise HTTPException(400, f"{until_text!r} is not a time (YYYY-MM-DDTHH:MM, UTC)") from None
        until_ms = wire.ms_from_datetime(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
        if until_ms <= console.clock():
            raise HTTPException(400, f"pause until {until_text} UTC: that time has passed")
    await run_in_threadpool(topics.pause, console.config, sets, name, until_ms)
    log.info("console_action", action="pause", queue=name, topic_sets=[s.name for s in sets], until_ms=until_ms,
             user=str(asking), client=asking.client)
    return _back(request, back, f"Paused {name}" + (f" until {until_text} UTC." if until_ms else " until resumed.")
                 + note)


async def resume(request: Request) -> Response:
    console = console_of(request)
    asking = await auth.require_operator(request, "resume")
    _, name, back, sets, note = await _queue(request, console)
    await run_in_threadpool(topics.resume, console.config, sets, name)
    log.info("console_action", action="resume", queue=name, topic_sets=[s.name for s in sets], user=str(asking),
             client=asking.client)
    return _back(request, back, f"Resumed {name}." + note)


async def purge(request: Request) -> Response:
    console = console_of(request)
    asking = await auth.require_operator(request, "purge")
    form, name, back, sets, note = await _queue(request, console)
    try:
        before_ms, expect = int(str(form.get("before_ms", ""))), int(str(form.get("expect", "")))
    except ValueError:
        raise HTTPException(400, "purge needs its confirmation (before_ms and expect)") from None
    await run_in_threadpool(topics.purge, console.config, sets, name, before_ms)
    log.info("console_action", action="purge", queue=name, topic_sets=[s.name for s in sets], before_ms=before_ms,
             waiting=expect, user=str(asking), client=asking.client)
    return _back(request, back, f"Purged {name}: {expect:,} waiting message(s) enqueued before then are settled "
                                "without a handler." + note)


async def redrive(request: Request) -> Response:
    """Redrives one letter (``mode=one``), the selected ones (``ids``), or all that match a filter; the last two only
    once confirmed with the count they touch."""
    console = console_of(request)
    asking = await auth.require_operator(request, "redrive")
    form = await request.form()
    one = str(form.get("one", ""))
    mode = "one" if one else str(form.get("mode", ""))
    models = console.models
    with models.lock:
        if mode == "filter":
            chosen = views.waiting_letters(models, letter_filter(form), letter_sets(console, form))
        elif mode in ("one", "selected"):
            refs = [parse_letter_ref(one, console)] if one else [parse_letter_ref(str(text), console)
                                                                 for text in form.getlist("ids")]
            if not refs or None in refs:
                raise HTTPException(400, "redrive: select letters by their ids (SET/PARTITION:OFFSET)")
            found = [(name, models[name].letters.get(mid)) for name, mid in filter(None, refs)]
            chosen = [(name, lt) for name, lt in found
                      if lt is not None and models[name].letters.waits(lt, models[name].state_of)]
        else:
            raise HTTPException(400, f"redrive: unknown mode {mode!r}")
    elsewhere = sorted({lt.queue for _, lt in chosen if console.home_set(lt.queue) is None})
    if elsewhere:
        raise HTTPException(409, f"redrive puts letters back onto their queue's own set, and this console does not "
                                 f"serve the set of {', '.join(map(repr, elsewhere))} "
                                 f"({', '.join(sorted({console.config.topics_for(q).name for q in elsewhere}))}): "
                                 "redrive them where it is served (kmq dlq redrive with that set's credentials)")
    if mode != "one" and str(form.get("expect", "")) != str(len(chosen)):
        return console.render(request, "confirm_redrive.html", title="Redrive dead letters", mode=mode,
                              count=len(chosen), form=form, sample=chosen[:10])
    done = await run_in_threadpool(_redrive, console, chosen)
    log.info("console_action", action="redrive", mode=mode, letters=done, user=str(asking), client=asking.client,
             **({"filter": {k: str(v) for k, v in form.items() if k not in ("csrf", "expect", "mode")}}
                if mode == "filter" else {"ids": [f"{name}/{lt.dlq_id}" for name, lt in chosen][:100]}))
    return _back(request, local_path(str(form.get("back", "")), "/dead-letters"),
                 f"Redrove {done:,} dead letter(s) back onto their queue(s).")


def _redrive(console: Console, chosen: list[tuple[str, Letter]]) -> int:
    """Redrives the letters, per set and queue: each copy goes onto its queue's own set (kmq.ops.dlq.put_back),
    then the set's redrive group of the queue moves past what no longer waits."""
    by_queue: dict[tuple[str, str], list[MessageId]] = defaultdict(list)
    for name, letter in chosen:
        by_queue[name, letter.queue].append(letter.dlq_id)
    done = 0
    for (name, queue), ids in by_queue.items():
        topic_set = console.models.sets[name]
        done += topics.redrive(console.config, topic_set, queue, ids)
        with console.models.lock:
            up_to = _redriven_prefix(console.models[name], queue, set(ids))
        topics.commit_redriven(console.config, topic_set, queue, up_to)
    return done


def _redriven_prefix(model: Model, queue: str, redriven: set[MessageId]) -> dict[int, int]:
    """Per dead-letter partition of the model's set, the offset past the queue's letters that no longer wait (those
    just redriven included), up to the first that still waits: ``kmq dlq`` then agrees that they were redriven."""
    blocked: set[int] = set()
    committed = model.letters.redriven_up_to(queue)
    out: dict[int, int] = {}
    mine = model.letters.select(LetterFilter(queue=queue, status=ANY), model.state_of)
    for letter, waits in sorted(mine, key=lambda item: item[0].dlq_id):
        p = letter.dlq_id.partition
        if p in blocked:
            continue
        if letter.dlq_id in redriven or not waits:
            out[p] = letter.dlq_id.offset + 1
        else:
            blocked.add(p)
    return {p: offset for p, offset in out.items() if offset > committed.get(p, 0)}
