"""Celery workers on kmq: two ``celery worker -c 2`` (prefork) processes share one queue; one is SIGKILLed (its
main process and pool children) mid-run and a kmq tracker hands its unacked tasks to the other: every task runs.
Remote control (``ping``) goes over the broadcast topic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from kmq import Config
from tests.frameworks.kombu.celery_app import TASK, make_app
from tests.helpers import ROOT, env_for, tracker_process

pytestmark = pytest.mark.timeout(240)


class Workers:
    """``celery worker`` processes, each in its own session so a kill takes its pool children too."""

    def __init__(self, env: dict[str, str], logs: Path, *, events: bool = False,
                 app: str = "tests.frameworks.kombu.celery_app") -> None:
        self._env = env
        self._logs = logs
        self._events = ["-E"] if events else []
        self._app = app
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, concurrency: int) -> None:
        with open(self._logs / f"{name}.log", "wb") as log:  # the child keeps its own descriptor
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", self._app, "worker", "-P", "prefork",
                 "-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "-l", "INFO", *self._events],
                cwd=ROOT, env=self._env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                # The main process only: Celery stops its pool itself. A SIGTERM to the whole group kills pool
                # children that may hold the pool's queue lock, and billiard's exit then waits for it for ever.
                proc.send_signal(signal.SIGTERM)
        for name, proc in list(self.procs.items()):
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGPWR)  # its stacks go to its log (faulthandler in celery_app)
                time.sleep(1)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
                pytest.fail(f"worker {name} did not stop within 60 s of SIGTERM")
        self.procs.clear()


@pytest.fixture
def celery_env(kombu_config: Config, tmp_path: Path) -> dict[str, str]:
    """The workers' environment; their logs stay in pytest's ``tmp_path`` (kept for the last runs)."""
    return {**env_for(kombu_config), "CELERY_TEST_PREFIX": f"{uuid.uuid4().hex[:10]}.",
            "CELERY_TEST_QUEUE": "tasks", "CELERY_TEST_OUT": str(tmp_path / "done.txt"),
            "CELERY_TEST_LOGS": str(tmp_path), "CELERY_TEST_VISIBILITY_S": "5", "CELERY_TEST_WORK_S": "0.05"}


def done_numbers(path: str) -> list[int]:
    try:
        return [int(line.split()[0]) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def wait_until(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(0.2)


def test_a_worker_killed_mid_run_loses_no_task(kombu_config: Config, celery_env: dict[str, str]) -> None:
    tasks = 200
    app = make_app(celery_env)
    tracker = tracker_process(kombu_config)
    workers = Workers(celery_env, Path(celery_env["CELERY_TEST_LOGS"]))
    try:
        workers.start("w1", 2)
        workers.start("w2", 2)

        def both_answer() -> bool:
            return len(app.control.ping(timeout=1.0)) == 2

        wait_until(both_answer, 90, "both workers to answer a remote-control ping")
        for number in range(tasks):
            app.send_task(TASK, args=[number])
        wait_until(lambda: len(done_numbers(celery_env["CELERY_TEST_OUT"])) >= tasks // 4, 90, "a quarter done")
        workers.kill("w1")
        wait_until(lambda: set(done_numbers(celery_env["CELERY_TEST_OUT"])) >= set(range(tasks)), 120,
                   "every task to run (the tracker redelivers the killed worker's)")
        done = done_numbers(celery_env["CELERY_TEST_OUT"])
        assert set(done) == set(range(tasks))
        print(f"\n{tasks} tasks, {len(done)} runs ({len(done) - tasks} run twice: in flight at the kill)")
        replies = app.control.ping(timeout=2.0)
        assert [next(iter(r)).split("@")[0] for r in replies] == ["w2"]
    finally:
        try:
            workers.stop_all()
        finally:
            tracker.kill()
            tracker.wait(10)
            app.close()


def test_a_pool_child_killed_mid_task_has_its_task_run_again_by_the_same_worker(
        kombu_config: Config, celery_env: dict[str, str]) -> None:
    """``task_reject_on_worker_lost``: Celery rejects the lost task with requeue, which the transport puts back at
    the head of the worker's own queue at once (no wait for the tracker: its visibility timeout here is 10 min)."""
    tasks = 20
    env = {**celery_env, "CELERY_TEST_WORK_S": "0.5", "CELERY_TEST_VISIBILITY_S": "600"}
    app = make_app(env)
    workers = Workers(env, Path(env["CELERY_TEST_LOGS"]))
    try:
        workers.start("w1", 2)
        wait_until(lambda: len(app.control.ping(timeout=1.0)) == 1, 90, "the worker to answer a ping")
        for number in range(tasks):
            app.send_task(TASK, args=[number])
        wait_until(lambda: len(done_numbers(env["CELERY_TEST_OUT"])) >= 3, 60, "three tasks done")
        parent = workers.procs["w1"].pid
        children = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(parent)], capture_output=True,
                                                       text=True).stdout.split()]
        assert children, "no pool children found"
        os.kill(children[0], signal.SIGKILL)
        wait_until(lambda: set(done_numbers(env["CELERY_TEST_OUT"])) >= set(range(tasks)), 90,
                   "every task to run, the lost one again")
        log = (Path(env["CELERY_TEST_LOGS"]) / "w1.log").read_text()
        assert "WorkerLostError" in log  # Celery saw the child die and rejected its task with requeue
    finally:
        workers.stop_all()
        app.close()


def test_remote_control_and_events_reach_a_worker_and_come_back(kombu_config: Config,
                                                               celery_env: dict[str, str]) -> None:
    """``inspect active`` sees a running task, a revoked countdown task never runs (kmq held it; the worker
    remembers the revoke), and a ``-E`` worker's task events reach an event receiver: all over the broadcast topic."""
    env = {**celery_env, "CELERY_TEST_WORK_S": "3.0"}
    app = make_app(env)
    tracker = tracker_process(kombu_config)  # the countdown tasks come back through it
    workers = Workers(env, Path(env["CELERY_TEST_LOGS"]), events=True)
    events: list[dict[str, object]] = []
    try:
        workers.start("w1", 1)
        wait_until(lambda: len(app.control.ping(timeout=1.0)) == 1, 90, "the worker to answer a ping")
        with app.connection_for_read() as conn:
            receiver = app.events.Receiver(conn, handlers={"task-succeeded": events.append})
            listening = threading.Thread(target=receiver.capture, kwargs={"limit": None, "timeout": 90}, daemon=True)
            listening.start()
            running = app.send_task(TASK, args=[1])

            def seen_active() -> bool:
                active = app.control.inspect(timeout=1.0).active() or {}
                return any(task["id"] == running.id for tasks in active.values() for task in tasks)

            wait_until(seen_active, 30, "inspect active to show the running task")
            revoked = app.send_task(TASK, args=[2], countdown=3)
            app.control.revoke(revoked.id)
            app.send_task(TASK, args=[3], countdown=4)
            wait_until(lambda: 3 in done_numbers(env["CELERY_TEST_OUT"]), 60, "the later countdown task to run")
            wait_until(lambda: any(event.get("uuid") == running.id for event in events), 30,
                       "the running task's task-succeeded event")
            receiver.should_stop = True
            listening.join(30)
        assert 2 not in done_numbers(env["CELERY_TEST_OUT"]), "a revoked task ran"
    finally:
        try:
            workers.stop_all()
        finally:
            tracker.kill()
            tracker.wait(10)
            app.close()
