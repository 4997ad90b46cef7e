"""The worker under restarts, time limits, process mode and a broker outage (``kmq worker`` subprocesses)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmq import Config
from kmq.ops.inspect import inspect_message
from kmq.wire import MessageId
from tests.appended import complete_lines
from tests.functional.test_cli import kmq, stats
from tests.helpers import ROOT, ConfigFactory, env_for, free_port, tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(180)


class Workers:
    """Starts ``kmq worker`` processes; every one still running at the test's end is killed, whatever its outcome."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self.release_file = record.with_suffix(".release")
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, config: Config, handler: str, queue: str, *extra: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "kmq.cli", "worker", handler, "--queue", queue,
                                 "--backoff-base", "0.2", "--backoff-max", "0.5", *extra], cwd=ROOT,
                                env={**env_for(config), "KMQTEST_RECORD": str(self.record),
                                     "KMQTEST_RELEASE": str(self.release_file)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def runs(self) -> list[dict[str, object]]:
        """Every handler run noted so far (tests.handlers._note)."""
        return [json.loads(line) for line in complete_lines(self.record)]

    def release(self) -> None:
        """Lets every tests.handlers:block_until_released run end."""
        self.release_file.touch()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    started = Workers(tmp_path / "runs.jsonl")
    yield started
    for proc in started.procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def terminate(proc: subprocess.Popen[str], timeout_s: float = 60) -> tuple[int, dict[str, int], str, float]:
    """SIGTERM, then (exit code, the printed counts, stderr, seconds to exit)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout_s)
    lines = out.strip().splitlines()
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err, time.monotonic() - started


def test_three_rolling_restarts_dead_letter_nothing_and_count_only_handler_runs(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    # Each worker is SIGTERMed while it runs a job; whatever else it read goes back unprocessed (with 0.3 s jobs
    # and one thread it reads nothing else: see the tests below). Counted as deliveries, 3 cycles would push jobs no
    # handler ran to max_deliveries and onto the dead-letter topic.
    config = kmq_config(redelivery_timeout_ms=10_000, max_deliveries=3)
    assert kmq(config, "send", "rolling", "job-{i}", "--count", "40").returncode == 0
    with tracker_thread(config):
        for cycle in range(3):
            before = len(workers.runs())
            worker = workers.start(config, "tests.handlers:note_slowly", "rolling")
            assert wait_for(lambda b=before: len(workers.runs()) >= b + 2, timeout_s=40), f"cycle {cycle}"
            code, counts, err, _ = terminate(worker)
            assert code == 0, err
            assert set(counts) <= {"acked", "returned"}, counts
        worker = workers.start(config, "tests.handlers:note_slowly", "rolling", "--concurrency", "8")
        assert wait_for(lambda: stats(config, "rolling")["acked"] == 40, timeout_s=60), stats(config, "rolling")
        code, _, err, _ = terminate(worker)
        assert code == 0, err
    figures = stats(config, "rolling")
    assert figures["dead_lettered"] == 0, figures
    runs = workers.runs()
    assert {r["payload"] for r in runs} == {f"job-{i}" for i in range(40)}
    assert {r["delivery_count"] for r in runs} == {1}, "a handler saw a count its runs do not explain"


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_a_handler_past_its_time_limit_is_stopped_released_and_finally_dead_lettered(
    kmq_config: ConfigFactory, workers: Workers, mode: str,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000, max_deliveries=2)
    port = free_port()
    extra = ["--handler-processes"] if mode == "processes" else []
    with tracker_thread(config):
        assert kmq(config, "send", "hung", "spin").returncode == 0
        worker = workers.start(config, "tests.handlers:spin_unless_ok", "hung", "--time-limit", "1",
                               "--metrics-port", str(port), *extra)
        assert wait_for(lambda: stats(config, "hung")["dead_lettered"] == 1, timeout_s=60), stats(config, "hung")
        # The one worker slot is free again: the next job runs and is acked.
        assert kmq(config, "send", "hung", "ok").returncode == 0
        assert wait_for(lambda: stats(config, "hung")["acked"] == 1, timeout_s=30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"timed_out": 2, "released": 1, "dead_lettered": 1, "acked": 1}
    assert "TimeLimitExceeded" in err and "message_dead_lettered" in err
    for line in ('kmq_worker_messages_total{queue="hung"} 3.0',
                 'kmq_worker_time_limit_exceeded_total{queue="hung"} 2.0',
                 'kmq_worker_message_retries_total{queue="hung"} 1.0',
                 'kmq_dead_letters_total{queue="hung"} 1.0',
                 'kmq_worker_messages_inprogress{queue="hung"} 0.0',
                 'kmq_worker_message_duration_seconds_count{queue="hung"} 3.0'):
        assert line in metrics, line
    spins = [r for r in workers.runs() if r["payload"] == "spin"]
    assert [r["delivery_count"] for r in spins] == [1, 2]
    if mode == "processes":
        assert len({r["pid"] for r in workers.runs()}) == 3, "each timed-out child is replaced"


def test_in_process_mode_the_handler_gets_real_metadata_and_can_settle_the_message(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000)
    with tracker_thread(config):
        assert kmq(config, "send", "proc", "job").returncode == 0
        worker = workers.start(config, "tests.handlers:release_first_then_ack", "proc", "--handler-processes")
        assert wait_for(lambda: stats(config, "proc")["acked"] == 1, timeout_s=60)
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"released": 1, "acked": 1}
    first, second = workers.runs()
    assert first["message_id"] == first["first_message_id"] != "-1:-1"
    assert second["first_message_id"] == first["message_id"] != second["message_id"]
    assert (first["delivery_count"], second["delivery_count"]) == (1, 2)
    assert first["enqueued_at_ms"] == second["enqueued_at_ms"] > 1_700_000_000_000


def test_acks_lost_in_a_broker_outage_give_a_non_zero_exit_within_the_close_timeout(workers: Workers) -> None:
    from kmq.testing.broker import LocalKafka

    broker = LocalKafka().start()
    try:
        config = Config(bootstrap_servers=broker.bootstrap_servers, connect_timeout_ms=3_000)
        assert kmq(config, "topics", "create", "--partitions", "2", "--marker-partitions", "1").returncode == 0
        assert kmq(config, "send", "outage", "job-{i}", "--count", "200").returncode == 0
        worker = workers.start(config, "tests.handlers:note_slowly", "outage", "--concurrency", "4",
                               "--drain-timeout", "2", "--close-timeout", "5", "--log-json", "--log-level", "info")
        tracker = subprocess.Popen([sys.executable, "-m", "kmq.cli", "tracker"], cwd=ROOT, env=env_for(config),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        workers.procs.append(tracker)
        assert wait_for(lambda: len(workers.runs()) >= 8, timeout_s=40)
        before_outage = len(workers.runs())
    finally:
        broker.stop()
    # Handlers go on: the running ones ack, the buffered ones (4 threads of 0.3 s jobs buffer 3 more: 0.25 s of
    # their work) start; none of those acks can be written now.
    assert wait_for(lambda: len(workers.runs()) > before_outage, timeout_s=20)
    code, counts, err, seconds = terminate(worker)
    assert code == 1, err
    print(f"worker stopped {seconds:.1f} s after SIGTERM with the broker down")
    assert seconds < 2 + 5 + 5, f"stopped after {seconds:.1f} s"
    events = [json.loads(line) for line in err.splitlines()]  # every line JSON, librdkafka's included
    failures = [e for e in events if e["event"] == "command_failed"]
    assert len(failures) == 1 and "were not written" in failures[0]["error"], err
    assert any(e["event"] == "librdkafka" for e in events)
    assert counts.get("acked", 0) > 0
    code, _, err, seconds = terminate(tracker)
    print(f"tracker stopped {seconds:.1f} s after SIGTERM with the broker down")
    assert code == 0 and seconds < 10 + 5, (code, seconds, err[-2000:])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def health(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.read().decode().strip()
    except urllib.error.HTTPError as err:
        return err.read().decode().strip()
    except urllib.error.URLError as err:  # not listening yet
        return f"unreachable: {err.reason}"


def held_by(config: Config, queue: str, message_id: str) -> tuple[str, str]:
    """(state, holder) of one message, as `kmq inspect` tells them."""
    life = inspect_message(config, queue, MessageId.parse(message_id))
    return life.state, life.holder


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_every_thread_runs_a_message_at_once_and_the_worker_holds_only_what_runs(
    kmq_config: ConfigFactory, workers: Workers, mode: str,
) -> None:
    # Handlers that block until the test releases them: with N threads, N of the N + 2 jobs must run at the same
    # time (a thread that took a batch of them would run them one after another), and the worker must hold no
    # other: the other 2 stay on the topic for whoever is free first.
    n = 4
    config = kmq_config(redelivery_timeout_ms=10_000)
    port = free_port()
    extra = ["--handler-processes"] if mode == "processes" else []
    assert kmq(config, "send", "busy", "job-{i}", "--count", str(n + 2)).returncode == 0
    with tracker_thread(config):
        worker = workers.start(config, "tests.handlers:block_until_released", "busy", "--concurrency", str(n),
                               "--metrics-port", str(port), *extra)
        assert wait_for(lambda: len(workers.runs()) >= n, timeout_s=60), \
            f"{len(workers.runs())} of {n} handlers running at once"
        metrics = scrape(port)
        assert f'kmq_worker_messages_inprogress{{queue="busy"}} {n}.0' in metrics
        assert f'kmq_worker_in_flight{{queue="busy"}} {n}.0' in metrics, "read and not running"
        for run in workers.runs():
            state, holder = held_by(config, "busy", str(run["message_id"]))
            assert state == "in_flight" and holder.endswith(f":{worker.pid}"), (run, state, holder)
        assert len(workers.runs()) == n
        workers.release()
        assert wait_for(lambda: stats(config, "busy")["acked"] == n + 2, timeout_s=60), stats(config, "busy")
        metrics = scrape(port)
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"acked": n + 2}
    for line in (f'kmq_worker_messages_total{{queue="busy"}} {n + 2}.0',
                 f'kmq_worker_message_duration_seconds_count{{queue="busy"}} {n + 2}.0',
                 f'kmq_worker_message_wait_seconds_count{{queue="busy"}} {n + 2}.0',
                 'kmq_worker_messages_inprogress{queue="busy"} 0.0'):
        assert line in metrics, line
    assert {r["delivery_count"] for r in workers.runs()} == {1}


def test_a_worker_without_a_tracker_says_so_in_its_health(kmq_config: ConfigFactory, workers: Workers) -> None:
    config = kmq_config()
    port = free_port()
    worker = workers.start(config, "tests.handlers:block_until_released", "lonely", "--metrics-port", str(port))
    assert wait_for(lambda: "no redelivery tracker" in health(port), timeout_s=60), health(port)
    assert health(port).startswith("ok (degraded: no redelivery tracker in group"), "served as 200: it works"
    code, _, err, _ = terminate(worker)
    assert code == 0, err


def test_one_worker_serves_two_queues_with_every_thread(kmq_config: ConfigFactory, workers: Workers) -> None:
    # Two jobs on each queue and 4 threads: all 4 run at once (a thread blocked on queue A's second job while
    # queue B's jobs wait would show as 3 or fewer).
    config = kmq_config(redelivery_timeout_ms=10_000)
    for queue in ("left", "right"):
        assert kmq(config, "send", queue, f"{queue}-{{i}}", "--count", "2").returncode == 0
    with tracker_thread(config):
        worker = workers.start(config, "tests.handlers:block_until_released", "left", "--queue", "right",
                               "--concurrency", "4")
        assert wait_for(lambda: len(workers.runs()) >= 4, timeout_s=60), \
            f"{len(workers.runs())} of 4 handlers running at once"
        assert sorted(str(r["payload"]) for r in workers.runs()) == ["left-0", "left-1", "right-0", "right-1"]
        workers.release()
        assert wait_for(lambda: stats(config, "left")["acked"] == 2 and stats(config, "right")["acked"] == 2,
                        timeout_s=60)
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"acked": 4}


def test_sigterm_gives_back_nothing_it_did_not_run_and_the_rest_come_once(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000)
    port = free_port()
    assert kmq(config, "send", "drain", "job-{i}", "--count", "5").returncode == 0
    with tracker_thread(config):
        first = workers.start(config, "tests.handlers:block_until_released", "drain", "--concurrency", "2",
                              "--metrics-port", str(port))
        assert wait_for(lambda: len(workers.runs()) >= 2, timeout_s=60)
        first.send_signal(signal.SIGTERM)  # draining: the two running handlers may finish, nothing new starts
        assert wait_for(lambda: health(port) == "unhealthy: stopping", timeout_s=30)
        workers.release()
        code, counts, err, _ = terminate(first)
        assert code == 0, err
        assert counts == {"acked": 2}, "it ran exactly what it held"
        second = workers.start(config, "tests.handlers:block_until_released", "drain", "--concurrency", "3")
        assert wait_for(lambda: stats(config, "drain")["acked"] == 5, timeout_s=60), stats(config, "drain")
        code, counts, err, _ = terminate(second)
    assert code == 0, err
    assert counts == {"acked": 3}
    runs = workers.runs()
    assert sorted(str(r["payload"]) for r in runs) == [f"job-{i}" for i in range(5)], "a job ran twice or never"
    assert {r["delivery_count"] for r in runs} == {1}


def test_every_message_gets_its_own_time_limit_from_its_own_start(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000, max_deliveries=1)
    port = free_port()
    assert kmq(config, "send", "limits", "spin-{i}", "--count", "3").returncode == 0
    with tracker_thread(config):
        worker = workers.start(config, "tests.handlers:spin_unless_ok", "limits", "--concurrency", "3",
                               "--time-limit", "2", "--metrics-port", str(port))
        assert wait_for(lambda: stats(config, "limits")["dead_lettered"] == 3, timeout_s=60), stats(config, "limits")
        metrics = scrape(port)
        code, counts, err, _ = terminate(worker)
    assert code == 0, err
    assert counts == {"timed_out": 3, "dead_lettered": 3}
    assert 'kmq_worker_time_limit_exceeded_total{queue="limits"} 3.0' in metrics
    assert sorted(str(r["payload"]) for r in workers.runs()) == ["spin-0", "spin-1", "spin-2"]
