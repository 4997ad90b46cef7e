"""One client_id, one live process: a second worker started with a live twin's client_id is refused, and the job
the twin runs is never run twice."""

from __future__ import annotations

import pytest

from tests.functional.test_cli import kmq, stats
from tests.functional.test_worker import Workers, terminate, workers
from tests.helpers import ConfigFactory, tracker_thread
from tests.markers_io import wait_for

__all__ = ["workers"]
pytestmark = pytest.mark.timeout(150)


def test_a_second_worker_with_a_live_twins_client_id_is_refused_and_the_job_runs_once(
    kmq_config: ConfigFactory, workers: Workers,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000, client_id="dup-1")
    with tracker_thread(config):
        assert kmq(config, "send", "jobs", "long").returncode == 0
        first = workers.start(config, "tests.handlers:note_a_long_run", "jobs")
        assert wait_for(lambda: any(r.get("event") == "start" for r in workers.runs()), timeout_s=60)
        second = workers.start(config, "tests.handlers:note_a_long_run", "jobs")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1, err
        assert err.strip().splitlines() == [
            f"kmq worker: error: client_id 'dup-1' is in use by a live consumer ({_holder(err)}): every worker "
            "process needs a client_id of its own (KMQ_CLIENT_ID), or none"], err
        assert wait_for(lambda: stats(config, "jobs")["acked"] == 1, timeout_s=60), stats(config, "jobs")
        code, counts, err, _ = terminate(first)
    assert code == 0, err
    assert counts == {"acked": 1}
    runs = workers.runs()
    assert [r["event"] for r in runs] == ["start", "end"], runs
    assert len({r["pid"] for r in runs}) == 1


def _holder(err: str) -> str:
    """The holder the error names (host:pid of the first worker)."""
    return err.split("live consumer (", 1)[1].split(")", 1)[0] if "live consumer (" in err else "?"
