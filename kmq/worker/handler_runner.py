"""Running a worker's handler on one message: in the worker's thread, or in a child process that thread owns.

Either way the run ends in an Outcome (returned, rejected, failed, timed out); the worker turns it into a settle.
In a child process the handler gets a Message with the real metadata whose ack/release/reject/give_back are
recorded and applied by the parent when the handler returns (``keep_alive`` is a no-op there: the parent keeps
every running message alive until its time limit).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal, Protocol, runtime_checkable

import structlog

from kmq.client.message import Message
from kmq.errors import KmqError, Reject, TimeLimitExceeded
from kmq.wire import MessageId
from kmq.worker.time_limit import TimeLimits

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: A handler: called with each Message; what it returns is ignored (returning acks the message).
Handler = Callable[[Message], object]
OutcomeKind = Literal["returned", "rejected", "failed", "timed_out"]
#: A settle a handler asked for in a child process: ("ack" | "release" | "reject" | "give_back", its argument).
RequestedSettle = tuple[str, Any]


@runtime_checkable
class WrapsHandler(Protocol):
    """What stands for a handler under its name (``@queue.worker`` makes a Worker of the function): ``load_handler``
    returns the handler itself."""

    @property
    def wrapped_handler(self) -> Handler: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    #: "Type: text" of a failure, or a Reject's reason.
    detail: str = ""
    traceback: str = ""
    settled: RequestedSettle | None = None


RETURNED = Outcome("returned")
TIMED_OUT = Outcome("timed_out")


def load_handler(spec: str) -> Handler:
    """Imports ``module:function``; raises KmqError naming what is missing."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise KmqError(f"handler must be MODULE:FUNCTION, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        log.debug("handler_import_failed", module=module_name, exc_info=True)
        raise KmqError(f"cannot import handler module {module_name!r}: {type(err).__name__}: {err}"
                       f"{_where(err)}") from err
    handler = getattr(module, attr, None)
    if isinstance(handler, WrapsHandler):  # a function decorated with @queue.worker: its handler
        return handler.wrapped_handler
    if not callable(handler):
        raise KmqError(f"{module_name!r} has no callable {attr!r}")
    return handler  # type: ignore[no-any-return]


def _where(err: BaseException) -> str:
    """`` (at FILE, line N)``: where the import failed in the user's code (the last frame outside the import
    machinery); "" for a syntax error (its message names the place) or a failure in the machinery (no such
    module)."""
    if isinstance(err, SyntaxError):
        return ""  # its message says where: "invalid syntax (app.py, line 3)"
    machinery = os.path.dirname(importlib.__file__)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith("<frozen ")
              and f.filename != __file__ and os.path.dirname(f.filename) != machinery]
    if not frames:
        return ""
    return f" (at {_relative(frames[-1].filename)}, line {frames[-1].lineno})"


def _relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


def _call(handler: Handler, message: Message) -> Outcome:
    try:
        handler(message)
    except Reject as rejected:
        return Outcome("rejected", str(rejected))
    except Exception as err:  # noqa: BLE001 - a handler's failure is the message's, not the worker's
        return Outcome("failed", f"{type(err).__name__}: {err}", traceback.format_exc())
    return RETURNED


# --- in the worker's thread ---------------------------------------------------------------------------------------


class ThreadRunner:
    """Runs the handler in the calling thread, under the time-limit watchdog."""

    def __init__(self, handler: Handler, time_limits: TimeLimits) -> None:
        self._handler = handler
        self._time_limits = time_limits

    def wait_ready(self) -> None:
        pass

    def run(self, message: Message, limit_s: float | None) -> Outcome:
        if limit_s is None:
            return _call(self._handler, message)
        try:
            watch = self._time_limits.watch(message, limit_s)
            try:
                outcome = _call(self._handler, message)
            finally:
                expired = self._time_limits.unwatch(watch)
        except TimeLimitExceeded:
            return TIMED_OUT
        return TIMED_OUT if expired else outcome

    def close(self) -> None:
        pass


# --- in a child process --------------------------------------------------------------------------------------------


class ProcessRunner:
    """One child process (spawned, so no librdkafka thread is forked) that runs the handler for one worker thread.
    Past the time limit the child is killed and replaced.

    The hand-off is one pipe round trip per message: the message's fields go to the child, None (returned) or an
    Outcome comes back. A child says it is ready once it has imported the handler; the time limit runs from then.
    """

    def __init__(self, spec: str, stopping: threading.Event) -> None:
        self._spec = spec
        self._stopping = stopping
        self._context = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._conn: Connection | None = None
        self._ready = False
        self._start()

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=_child_main, args=(child, self._spec), daemon=True,
                                              name="kmq-handler")
        self._process.start()
        child.close()
        self._conn = parent
        self._ready = False

    def wait_ready(self) -> None:
        """Blocks until the child has imported the handler (or died: the next run reports it)."""
        if not self._ready and self._conn is not None:
            with contextlib.suppress(EOFError, OSError):
                self._conn.recv_bytes()
            self._ready = True

    def run(self, message: Message, limit_s: float | None) -> Outcome:
        self.wait_ready()
        conn = self._conn
        assert conn is not None
        try:
            _send(conn, (message.payload, message.record_headers, message.queue, tuple(message.message_id),
                         message.delivery_count, tuple(message.first_message_id), message.enqueued_at_ms))
            if limit_s is not None and not conn.poll(limit_s):
                self._replace()
                return TIMED_OUT
            outcome: Outcome | None = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            code = self._process.exitcode if self._process is not None else None
            if not self._stopping.is_set():
                self._replace()
            return Outcome("failed", f"HandlerProcessDied: the handler's process exited (exit code {code})")
        return RETURNED if outcome is None else outcome

    def _replace(self) -> None:
        self.close()
        self._start()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._process is not None:
            self._process.kill()
            self._process.join(5)
            self._process = None


class _Recorder:
    """The Settler of a Message in a child process: records the first settle for the parent to apply."""

    def __init__(self) -> None:
        self.requested: RequestedSettle | None = None

    def _record(self, message: Message, how: str, arg: Any) -> None:
        if message.settled:
            raise message._already_settled(how)
        message._settled_as = how
        self.requested = (how, arg)

    def _ack(self, message: Message) -> None:
        self._record(message, "ack", None)

    def _release(self, message: Message, delay_ms: int) -> None:
        self._record(message, "release", delay_ms / 1000)

    def _reject(self, message: Message, reason: str) -> None:
        self._record(message, "reject", reason)

    def _give_back(self, message: Message) -> None:
        self._record(message, "give_back", None)

    def _keep_alive(self, message: Message) -> None:
        pass


def _child_main(conn: Connection, spec: str) -> None:
    # A terminal's Ctrl-C reaches the whole process group: the parent drains, then stops its children itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        handler = load_handler(spec)
    except KmqError as err:
        failure = Outcome("failed", str(err))
        handler = None
    _send(conn, None)  # ready
    while True:
        try:
            task = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        if handler is None:
            _send(conn, failure)
            continue
        payload, headers, queue, message_id, count, first_id, enqueued_at_ms = task
        recorder = _Recorder()
        message = Message(payload, headers, queue, MessageId(*message_id), count, MessageId(*first_id),
                          enqueued_at_ms, recorder)
        outcome = _call(handler, message)
        if recorder.requested is not None:
            outcome = Outcome(outcome.kind, outcome.detail, outcome.traceback, recorder.requested)
        _send(conn, None if outcome is RETURNED else outcome)


def _send(conn: Connection, obj: object) -> None:
    """``conn.send`` without building a ForkingPickler per message (a sixth of the parent's time in process mode):
    the hand-off carries plain values only."""
    conn.send_bytes(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))
