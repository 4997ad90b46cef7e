"""close_within: a client's close, bounded in time, never raising."""

from __future__ import annotations

import threading
import time

import structlog
from structlog.testing import capture_logs

from kmq._kafka.closing import close_within

log = structlog.get_logger("test")


class Client:
    def __init__(self, *, hang_s: float = 0.0, fail: bool = False) -> None:
        self.hang_s, self.fail = hang_s, fail
        self.closed = threading.Event()

    def close(self) -> None:
        time.sleep(self.hang_s)
        if self.fail:
            raise RuntimeError("broker gone")
        self.closed.set()


def test_a_close_that_returns_in_time_is_waited_for() -> None:
    client = Client()
    with capture_logs() as logs:
        assert close_within(client, 2.0, log) is True
    assert client.closed.is_set() and not logs


def test_a_close_that_hangs_is_left_behind_with_one_warning() -> None:
    client = Client(hang_s=0.5)
    started = time.monotonic()
    with capture_logs() as logs:
        assert close_within(client, 0.05, log, what="consumer_old_client") is False
    assert time.monotonic() - started < 0.4
    assert [(e["event"], e["log_level"]) for e in logs] == [("consumer_old_client_close_timeout", "warning")]
    assert client.closed.wait(2), "it goes on closing in the background"


def test_a_close_that_raises_is_logged_not_raised() -> None:
    with capture_logs() as logs:
        assert close_within(Client(fail=True), 2.0, log) is True
    assert [e["event"] for e in logs] == ["consumer_close_failed"]
    assert "RuntimeError: broker gone" in logs[0]["error"]
