"""``kmq worker --processes N``: N worker processes that each consume, supervised by the parent (kmq.worker.pool)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from kmq import Config
from kmq.worker.pool import REPORT_S
from tests.functional.test_cli import kmq, stats
from tests.functional.test_worker import Workers, terminate, workers  # noqa: F401 - the fixture
from tests.helpers import ConfigFactory, free_port, tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(180)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:  # not serving yet
        return 0, str(err)


def _send(config: Config, queue: str, payloads: list[str]) -> None:
    for payload in payloads:
        assert kmq(config, "send", queue, payload).returncode == 0


def test_each_process_consumes_a_dead_one_is_restarted_and_the_exit_status_says_so(
    kmq_config: ConfigFactory, workers: Workers,  # noqa: F811
) -> None:
    config = kmq_config(partitions=4, redelivery_timeout_ms=10_000, client_id="pool")
    port = free_port()
    with tracker_thread(config):
        pool = workers.start(config, "tests.handlers:note", "jobs", "--processes", "2", "--metrics-port", str(port))
        assert wait_for(lambda: _get(port, "/healthz")[0] == 200, timeout_s=60), _get(port, "/healthz")
        _send(config, "jobs", [f"job-{i}" for i in range(12)])
        assert wait_for(lambda: stats(config, "jobs")["acked"] == 12, timeout_s=60), stats(config, "jobs")
        pids = {r["pid"] for r in workers.runs()}
        assert len(pids) == 2, "each process consumes its share of the partitions"
        status, metrics = _get(port, "/metrics")
        assert status == 200
        assert 'kmq_worker_processes{state="serving"} 2.0' in metrics
        for index in (0, 1):
            assert f'process="{index}"' in metrics and 'kmq_worker_messages_total{' in metrics

        time.sleep(2 * REPORT_S)  # the child about to die has reported the acks it made
        os.kill(min(pids), signal.SIGKILL)
        assert wait_for(lambda: "kmq_worker_process_restarts_total 1.0" in _get(port, "/metrics")[1], timeout_s=30)
        assert wait_for(lambda: _get(port, "/healthz")[0] == 200, timeout_s=60), _get(port, "/healthz")
        # The new child consumes once the group has given it partitions: healthy may come first, so send in
        # rounds until a job ran in a third process.
        sent = 12
        for _ in range(20):
            _send(config, "jobs", [f"after-{sent + i}" for i in range(4)])
            sent += 4
            if wait_for(lambda: len({r["pid"] for r in workers.runs()}) == 3, timeout_s=3):
                break
        assert wait_for(lambda: stats(config, "jobs")["acked"] == sent, timeout_s=60), stats(config, "jobs")
        code, counts, err, seconds = terminate(pool)
    assert code == 1, "a child died: the pool's exit status says so"
    assert "was killed by SIGKILL while serving" in err, err
    assert counts["processes_restarted"] == 1 and counts["acked"] >= sent, counts
    assert seconds < 30
    assert len({r["pid"] for r in workers.runs()}) == 3, "the dead child was replaced by a new process"


def test_a_pool_drains_on_sigterm_and_exits_0(kmq_config: ConfigFactory, workers: Workers) -> None:  # noqa: F811
    config = kmq_config(partitions=2)
    with tracker_thread(config):
        _send(config, "drain", [f"job-{i}" for i in range(6)])
        pool = workers.start(config, "tests.handlers:note", "drain", "--processes", "2", "--concurrency", "2")
        assert wait_for(lambda: stats(config, "drain")["acked"] == 6, timeout_s=60), stats(config, "drain")
        code, counts, err, _ = terminate(pool)
    assert code == 0, err
    assert counts == {"acked": 6}, counts


def test_a_pool_that_cannot_start_exits_1_at_once(kmq_config: ConfigFactory, workers: Workers) -> None:  # noqa: F811
    config = kmq_config().replace(message_topic="no-such-topic", marker_topic="no-such-markers")
    pool = workers.start(config, "tests.handlers:note", "q", "--processes", "2")
    _out, err = pool.communicate(timeout=60)
    assert pool.returncode == 1, err
    assert "no-such-topic" in err and "worker_pool_start_failed" in err, err


def test_the_old_processes_flag_without_a_count_is_a_usage_error(kmq_config: ConfigFactory) -> None:
    result = subprocess.run([*kmq_argv(), "worker", "tests.handlers:note", "--queue", "q", "--processes"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--processes takes a count" in result.stderr and "--handler-processes" in result.stderr


def kmq_argv() -> list[str]:
    import sys
    return [sys.executable, "-m", "kmq.cli"]
