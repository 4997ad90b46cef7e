"""Coroutine handlers in ``kmq worker`` (subprocesses on a real broker): N runs at once on one event loop, the
same settle rules as thread handlers, time limits by cancellation, and the SIGTERM drain."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.test_cli import kmq, stats
from tests.functional.test_worker import Workers, health, scrape, terminate
from tests.helpers import ConfigFactory, free_port, tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    started = Workers(tmp_path / "runs.jsonl")
    yield started
    for proc in started.procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def test_n_coroutine_handlers_run_at_once_on_one_thread_and_the_worker_holds_only_what_runs(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    # 5 handlers that await until the test releases them, 5 + 2 jobs: all 5 must run at once (one event loop), and
    # the worker must hold no other job.
    n = 5
    config = kmq_config(redelivery_timeout_ms=10_000)
    port = free_port()
    assert kmq(config, "send", "aio", "job-{i}", "--count", str(n + 2)).returncode == 0
    with tracker_thread(config):
        worker = workers.start(config, "tests.handlers_async:block_until_released", "aio", "--concurrency", str(n),
                               "--metrics-port", str(port))
        assert wait_for(lambda: len(workers.runs()) >= n, timeout_s=60), \
            f"{len(workers.runs())} of {n} handlers running at once"
        metrics = scrape(port)
        assert f'kmq_worker_messages_inprogress{{queue="aio"}} {n}.0' in metrics
        assert f'kmq_worker_in_flight{{queue="aio"}} {n}.0' in metrics, "read and not running"
        assert len(workers.runs()) == n
        assert len({r["pid"] for r in workers.runs()}) == 1
        workers.release()
        assert wait_for(lambda: stats(config, "aio")["acked"] == n + 2, timeout_s=60), stats(config, "aio")
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"acked": n + 2}
    assert {r["delivery_count"] for r in workers.runs()} == {1}


def test_a_coroutine_handler_is_settled_like_a_thread_handler(kmq_config: ConfigFactory, workers: Workers) -> None:
    # return -> ack; Reject -> dead letter at once; an exception -> release with backoff, then the second delivery.
    config = kmq_config(redelivery_timeout_ms=10_000)
    with tracker_thread(config):
        for payload in ("ok", "reject", "flaky"):
            assert kmq(config, "send", "rules", payload).returncode == 0
        worker = workers.start(config, "tests.handlers_async:ack_reject_or_fail_once", "rules", "--concurrency", "3")
        assert wait_for(lambda: stats(config, "rules")["acked"] == 2, timeout_s=60), stats(config, "rules")
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"acked": 2, "rejected": 1, "released": 1}
    assert "message_rejected" in err and "handler_failed" in err and "RuntimeError: first attempt fails" in err
    figures = stats(config, "rules")
    assert figures["dead_lettered"] == 1, figures
    flaky = [r["delivery_count"] for r in workers.runs() if r["payload"] == "flaky"]
    assert flaky == [1, 2]
    assert sorted(str(r["payload"]) for r in workers.runs()) == ["flaky", "flaky", "ok", "reject"]


def test_a_coroutine_handler_past_its_time_limit_is_cancelled_released_and_finally_dead_lettered(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000, max_deliveries=2)
    port = free_port()
    with tracker_thread(config):
        assert kmq(config, "send", "hung", "spin").returncode == 0
        worker = workers.start(config, "tests.handlers_async:spin_unless_ok", "hung", "--time-limit", "1",
                               "--metrics-port", str(port))
        assert wait_for(lambda: stats(config, "hung")["dead_lettered"] == 1, timeout_s=60), stats(config, "hung")
        # The one slot is free again: the next job runs and is acked.
        assert kmq(config, "send", "hung", "ok").returncode == 0
        assert wait_for(lambda: stats(config, "hung")["acked"] == 1, timeout_s=30)
        metrics = scrape(port)
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"timed_out": 2, "released": 1, "dead_lettered": 1, "acked": 1}
    assert "the handler's task is cancelled" in err
    for line in ('kmq_worker_time_limit_exceeded_total{queue="hung"} 2.0',
                 'kmq_worker_messages_inprogress{queue="hung"} 0.0',
                 'kmq_worker_message_duration_seconds_count{queue="hung"} 3.0'):
        assert line in metrics, line
    assert [r["delivery_count"] for r in workers.runs() if r["payload"] == "spin"] == [1, 2]


def test_sigterm_drains_running_coroutine_handlers_and_gives_back_the_rest(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000)
    port = free_port()
    assert kmq(config, "send", "drain", "job-{i}", "--count", "5").returncode == 0
    with tracker_thread(config):
        first = workers.start(config, "tests.handlers_async:block_until_released", "drain", "--concurrency", "2",
                              "--metrics-port", str(port))
        assert wait_for(lambda: len(workers.runs()) >= 2, timeout_s=60)
        first.send_signal(signal.SIGTERM)  # draining: the two running handlers may finish, nothing new starts
        assert wait_for(lambda: health(port) == "unhealthy: stopping", timeout_s=30)
        workers.release()
        code, counts, err, _ = terminate(first)
        assert code == 0, err
        assert counts == {"acked": 2}, "it ran exactly what it held"
        second = workers.start(config, "tests.handlers_async:block_until_released", "drain", "--concurrency", "3")
        assert wait_for(lambda: stats(config, "drain")["acked"] == 5, timeout_s=60), stats(config, "drain")
        code, counts, err, _ = terminate(second)
    assert code == 0, err
    assert counts == {"acked": 3}
    runs = workers.runs()
    assert sorted(str(r["payload"]) for r in runs) == [f"job-{i}" for i in range(5)], "a job ran twice or never"
    assert {r["delivery_count"] for r in runs} == {1}


def test_coroutine_handlers_still_running_at_the_drain_timeout_are_cancelled_and_their_messages_released(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=60_000)
    assert kmq(config, "send", "stuck", "job-{i}", "--count", "2").returncode == 0
    with tracker_thread(config):
        first = workers.start(config, "tests.handlers_async:block_until_released", "stuck", "--concurrency", "2",
                              "--drain-timeout", "1")
        assert wait_for(lambda: len(workers.runs()) >= 2, timeout_s=60)
        code, counts, err, _ = terminate(first)
        assert code == 0, err
        assert counts == {"released": 2}, "released by the consumer's close, counted in the summary"
        assert "worker_drain_timeout" in err and "cancelled=2" in err
        # Released at close, not left to the 60 s redelivery timeout: the next worker gets both within it.
        workers.release()
        second = workers.start(config, "tests.handlers_async:block_until_released", "stuck", "--concurrency", "2")
        assert wait_for(lambda: stats(config, "stuck")["acked"] == 2, timeout_s=45), stats(config, "stuck")
        code, counts, err, _ = terminate(second)
    assert code == 0, err
    assert counts == {"acked": 2}
    assert sorted(int(str(r["delivery_count"])) for r in workers.runs()) == [1, 1, 2, 2]


def test_a_coroutine_handler_running_past_the_redelivery_timeout_is_kept_alive(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=3_000)
    assert kmq(config, "send", "long", "job").returncode == 0
    with tracker_thread(config):
        worker = workers.start(config, "tests.handlers_async:block_until_released", "long", "--concurrency", "2")
        assert wait_for(lambda: len(workers.runs()) == 1, timeout_s=60)
        # Three redelivery timeouts while the handler awaits: keep-alives hold the message, nobody gets a copy.
        assert not wait_for(lambda: len(workers.runs()) > 1, timeout_s=9), workers.runs()
        workers.release()
        assert wait_for(lambda: stats(config, "long")["acked"] == 1, timeout_s=30), stats(config, "long")
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"acked": 1}
    assert stats(config, "long")["redelivered"] == 0
