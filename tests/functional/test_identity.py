"""One client_id, one live process: a second worker started with a live twin's client_id is refused, and the job
the twin runs is never run twice."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from kmq import Config
from kmq.wire.control import control_topic
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


def test_without_a_control_topic_a_fenced_worker_exits_1_naming_its_client_id(
    kmq_config: ConfigFactory, workers: Workers, admin: AdminClient,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000, client_id="dup-2")
    control = control_topic(config.message_topic)
    for future in admin.delete_topics([control], operation_timeout=30).values():
        future.result(timeout=30)
    assert wait_for(lambda: control not in admin.list_topics(timeout=10).topics, timeout_s=30)
    first = workers.start(config, "tests.handlers:record", "jobs")
    assert wait_for(lambda: _member_of(admin, config), timeout_s=60)
    second = workers.start(config, "tests.handlers:record", "jobs")  # unguarded: it joins and fences the first
    _, err = first.communicate(timeout=90)
    assert first.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("kmq worker: error:")]
    assert errors == ["kmq worker: error: consumer of queue 'jobs' was fenced: client_id (group.instance.id) "
                      "'dup-2' is used by another consumer"], err
    assert "client_id_unguarded" in err
    terminate(second)


def _member_of(admin: AdminClient, config: Config) -> bool:
    group = config.consumer_group("jobs")
    try:
        described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:  # noqa: BLE001 - not there yet
        return False
    return bool(described.members)
