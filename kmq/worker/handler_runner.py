"""Running a worker's handler on one message: in the worker's thread, or in a child process that thread owns.

Either way the run ends in an Outcome (returned, rejected, failed, timed out); the worker turns it into a settle.
In a child process the handler gets a Message with the real metadata whose ack/release/reject/give_back are
recorded and applied by the parent when the handler returns (``keep_alive`` is a no-op there: the parent keeps
every running message alive until its time limit).
"""

from __future__ import annotations

import importlib
import multiprocessing
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

from kmq.client.message import Message
from kmq.errors import KmqError, Reject, TimeLimitExceeded
from kmq.wire import MessageId
from kmq.worker.time_limit import TimeLimits

Handler = Callable[[Message], object]
OutcomeKind = Literal["returned", "rejected", "failed", "timed_out"]
#: A settle a handler asked for in a child process: ("ack" | "release" | "reject" | "give_back", its argument).
RequestedSettle = tuple[str, Any]


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
        raise KmqError(f"cannot import handler module {module_name!r}: {type(err).__name__}: {err}") from err
    handler = getattr(module, attr, None)
    if not callable(handler):
        raise KmqError(f"{module_name!r} has no callable {attr!r}")
    return handler  # type: ignore[no-any-return]


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
    Past the time limit the child is killed and replaced."""

    def __init__(self, spec: str, stopping: threading.Event) -> None:
        self._spec = spec
        self._stopping = stopping
        self._context = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._conn: Connection | None = None
        self._start()

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=_child_main, args=(child, self._spec), daemon=True,
                                              name="kmq-handler")
        self._process.start()
        child.close()
        self._conn = parent

    def run(self, message: Message, limit_s: float | None) -> Outcome:
        conn = self._conn
        assert conn is not None
        conn.send((message.payload, message.headers, message.queue, tuple(message.message_id),
                   message.delivery_count, tuple(message.first_message_id), message.enqueued_at_ms))
        waited = 0.0
        while not conn.poll(0.2):
            waited += 0.2
            if limit_s is not None and waited >= limit_s:
                self._replace()
                return TIMED_OUT
        try:
            outcome: Outcome = conn.recv()
        except (EOFError, OSError):
            code = self._process.exitcode if self._process is not None else None
            if not self._stopping.is_set():
                self._replace()
            return Outcome("failed", f"HandlerProcessDied: the handler's process exited (exit code {code})")
        return outcome

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
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if handler is None:
            conn.send(failure)
            continue
        payload, headers, queue, message_id, count, first_id, enqueued_at_ms = task
        recorder = _Recorder()
        message = Message(payload, headers, queue, MessageId(*message_id), count, MessageId(*first_id),
                          enqueued_at_ms, recorder)
        outcome = _call(handler, message)
        if recorder.requested is not None:
            outcome = Outcome(outcome.kind, outcome.detail, outcome.traceback, recorder.requested)
        conn.send(outcome)
