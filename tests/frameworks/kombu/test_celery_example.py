"""examples/celery_app.py as its docstring runs it: a worker, a tracker, then the example's three tasks: one runs at
once, one after its 10 s countdown (held by kmq), one is rejected into the dead-letter topic."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kmq import Config
from kmq.kombu.envelope import HEADER_TASK as TASK_HEADER
from tests.frameworks.kombu.test_celery_worker import Workers, stop_tracker, wait_until
from tests.helpers import ROOT, env_for, tracker_process
from tests.markers_io import read_topic

pytestmark = pytest.mark.timeout(180)

TASK = "examples.send_email"


def test_the_example_app_runs_its_three_tasks(kombu_config: Config, tmp_path: Path) -> None:
    env = env_for(kombu_config)
    log = tmp_path / "w1.log"
    tracker = tracker_process(kombu_config)
    workers = Workers(env, tmp_path, app="examples.celery_app")
    try:
        workers.start("w1", 1)
        wait_until(lambda: "ready." in log.read_text(), 90, "the example worker to start")
        sent_at = time.monotonic()
        subprocess.run([sys.executable, "-m", "examples.celery_app"], cwd=ROOT, env=env, check=True, timeout=60)
        wait_until(lambda: "sending to grace@example.com" in log.read_text(), 90, "the countdown task to run")
        assert time.monotonic() - sent_at >= 10, "the countdown task ran before its countdown"
        assert "sending to ada@example.com" in log.read_text()

        def rejected(records: list[object]) -> list[object]:
            return [r for r in records if (TASK_HEADER, TASK.encode()) in (r.headers() or [])]  # type: ignore[attr-defined]

        letters = rejected(read_topic(kombu_config.bootstrap_servers, kombu_config.dlq_topic,
                                      until=lambda records: bool(rejected(records))))
        assert len(letters) == 1  # Celery passes no reason to kombu: the letter says "rejected … (requeue=False)"
    finally:
        try:
            workers.stop_all()
        finally:
            stop_tracker(tracker)
