"""Celery workers on kmq: two ``celery worker -c 2`` (prefork) processes share one queue; one is SIGKILLed (its
main process and pool children) mid-run and a kmq tracker hands its unacked tasks to the other: every task runs, and
only those a task had are counted again. Two workers with prefetch 1 share a backlog; a warm shutdown gives back
what it prefetched uncounted; a task that kills its pool child stops at ``max_deliveries``. Remote control
(``ping``) goes over the broadcast topic."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery

from kmq import Config
from tests.appended import complete_lines
from tests.frameworks.kombu.celery_app import TASK, make_app
from tests.helpers import ROOT, env_for, run_kmq, tracker_process

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
            "CELERY_TEST_STARTS": str(tmp_path / "started.txt"),
            "CELERY_TEST_LOGS": str(tmp_path), "CELERY_TEST_VISIBILITY_S": "5", "CELERY_TEST_WORK_S": "0.05"}


def done_numbers(path: str) -> list[int]:
    return [run.number for run in runs(path)]


@dataclass(frozen=True)
class Run:
    """A line the test task wrote: its argument, the worker (``name@host``), the pool process, its delivery count."""

    number: int
    worker: str
    pid: int
    delivery_count: int


def runs(path: str) -> list[Run]:
    return [Run(int(n), w.split("@")[0], int(p), int(c))
            for n, w, p, c in (line.split() for line in complete_lines(Path(path)))]


def queue_stats(config: Config, env: dict[str, str]) -> dict[str, int]:
    result = run_kmq(config, "stats", "--json", "--queue", env["CELERY_TEST_PREFIX"] + env["CELERY_TEST_QUEUE"])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]  # type: ignore[no-any-return]


def stop_tracker(tracker: subprocess.Popen[str]) -> None:
    """SIGTERM: it leaves its group, so the next test's tracker gets the markers partitions at once instead of
    after the dead member's session timeout."""
    tracker.terminate()
    try:
        tracker.wait(30)
    except subprocess.TimeoutExpired:
        tracker.kill()
        tracker.wait(10)


def wait_until(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(0.2)


@contextlib.contextmanager
def celery_run(env: dict[str, str], tracker: Config | None,
               *, events: bool = False) -> Iterator[tuple[Celery, Workers]]:
    """The test's Celery app and its workers (and a tracker on ``tracker``'s config): all stopped at the end."""
    app = make_app(env)
    tracking = None if tracker is None else tracker_process(tracker)
    workers = Workers(env, Path(env["CELERY_TEST_LOGS"]), events=events)
    try:
        yield app, workers
    finally:
        try:
            workers.stop_all()
        finally:
            if tracking is not None:
                stop_tracker(tracking)
            app.close()


def test_a_worker_killed_mid_run_loses_no_task(kombu_config: Config, celery_env: dict[str, str]) -> None:
    tasks = 200
    with celery_run(celery_env, tracker=kombu_config) as (app, workers):
        workers.start("w1", 2)
        workers.start("w2", 2)

        def both_answer() -> bool:
            return len(app.control.ping(timeout=1.0)) == 2

        wait_until(both_answer, 90, "both workers to answer a remote-control ping")
        for number in range(tasks):
            app.send_task(TASK, args=[number])
        wait_until(lambda: len(done_numbers(celery_env["CELERY_TEST_OUT"])) >= tasks // 4, 90, "a quarter done")
        workers.kill("w1")
        killed_at = len(runs(celery_env["CELERY_TEST_STARTS"]))
        wait_until(lambda: set(done_numbers(celery_env["CELERY_TEST_OUT"])) >= set(range(tasks)), 120,
                   "every task to run (the tracker redelivers the killed worker's)")
        done = done_numbers(celery_env["CELERY_TEST_OUT"])
        assert set(done) == set(range(tasks))
        print(f"\n{tasks} tasks, {len(done)} runs ({len(done) - tasks} run twice: in flight at the kill)")
        # What comes back counted is what w1's tasks ran (acks not yet written at the kill) and at most its prefetch
        # (multiplier 1 x concurrency 2) that no task of it had started (224 of them before: all it had Started).
        started_by_w1 = {r.number for r in runs(celery_env["CELERY_TEST_STARTS"])[:killed_at] if r.worker == "w1"}
        again = {r.number for r in runs(celery_env["CELERY_TEST_STARTS"]) if r.delivery_count > 1}
        print(f"counted again: {len(again)}, of which a task of w1 had started {len(again & started_by_w1)}")
        assert len(again - started_by_w1) <= 2, (again, started_by_w1)
        assert queue_stats(kombu_config, celery_env)["recovered"] == len(again)
        replies = app.control.ping(timeout=2.0)
        assert [next(iter(r)).split("@")[0] for r in replies] == ["w2"]


def test_two_workers_with_prefetch_1_share_a_backlog_sent_before_either_started(
        kombu_config: Config, celery_env: dict[str, str]) -> None:
    """Each worker's consumer Starts one task at a time (prefetch 1 x concurrency 1): the first to join its group
    cannot take the backlog (it took all 30 of 30 when its consumer Started up to max_in_flight), and once both
    hold half the partitions each runs about half."""
    # 8 on each of the 4 partitions (a producer spreads a burst evenly), so each worker's half holds 16; tasks slow
    # enough that the first worker's head start (until the second one's join reaches it) is a task or two.
    tasks = 32
    env = {**celery_env, "CELERY_TEST_WORK_S": "2.0"}
    with celery_run(env, tracker=None) as (app, workers):
        for number in range(tasks):
            app.send_task(TASK, args=[number])
        workers.start("a", 1)
        workers.start("b", 1)
        wait_until(lambda: set(done_numbers(env["CELERY_TEST_OUT"])) >= set(range(tasks)), 120, "every task to run")
        done = runs(env["CELERY_TEST_OUT"])
        shares = {name: sum(r.worker == name for r in done) for name in ("a", "b")}
        print(f"\n{tasks} tasks of 2 s: {shares}")
        assert len(done) == tasks and max(shares.values()) <= 0.6 * tasks, shares


def test_a_warm_shutdown_gives_back_the_tasks_no_pool_process_had_uncounted(
        kombu_config: Config, celery_env: dict[str, str]) -> None:
    """Prefetch 4 x concurrency 1: a worker holds one running task and three reserved; SIGTERM lets the running
    one finish and gives the reserved ones back (not deliveries: the next worker runs them as first deliveries)."""
    tasks = 8
    env = {**celery_env, "CELERY_TEST_WORK_S": "1.5", "CELERY_TEST_PREFETCH": "4"}
    with celery_run(env, tracker=kombu_config) as (app, workers):  # what is given back, a tracker copies at once
        for number in range(tasks):
            app.send_task(TASK, args=[number])
        workers.start("first", 1)
        wait_until(lambda: len(runs(env["CELERY_TEST_STARTS"])) >= 1, 90, "the first task to start")
        first = workers.procs.pop("first")
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0
        by_first = {r.number for r in runs(env["CELERY_TEST_STARTS"])}
        workers.start("second", 1)
        wait_until(lambda: set(done_numbers(env["CELERY_TEST_OUT"])) >= set(range(tasks)), 90, "every task to run")
        done = runs(env["CELERY_TEST_OUT"])
        assert sorted(r.number for r in done) == list(range(tasks)), "a task ran twice"
        assert {r.delivery_count for r in done} == {1}
        assert {r.number for r in done if r.worker == "first"} == by_first
        counts = queue_stats(kombu_config, env)
        assert (counts["delivered"], counts["redelivered"], counts["acked"]) == (tasks, 0, tasks), counts
        assert counts["returned"] >= 1, counts  # at least the reserved ones went back uncounted


def test_a_pool_child_killed_mid_task_has_its_task_run_again_as_a_new_delivery(
        kombu_config: Config, celery_env: dict[str, str]) -> None:
    """``task_reject_on_worker_lost``: Celery rejects the lost task with requeue, which the transport releases: a
    tracker hands it out again at once (its visibility timeout here is 10 min), as delivery 2."""
    tasks = 20
    env = {**celery_env, "CELERY_TEST_WORK_S": "0.5", "CELERY_TEST_VISIBILITY_S": "600"}
    with celery_run(env, tracker=kombu_config) as (app, workers):
        workers.start("w1", 2)
        wait_until(lambda: len(app.control.ping(timeout=1.0)) == 1, 90, "the worker to answer a ping")
        for number in range(tasks):
            app.send_task(TASK, args=[number])
        wait_until(lambda: len(done_numbers(env["CELERY_TEST_OUT"])) >= 3, 60, "three tasks done")
        # A child that is running a task, not any child: one killed between taking a job from the pool and starting
        # it can hang Celery's pool for good, a known Celery defect (celery/celery#2011) that no broker can help.
        running: list[Run] = []

        def a_task_running() -> bool:
            done = {(r.number, r.delivery_count) for r in runs(env["CELERY_TEST_OUT"])}
            running[:] = [r for r in runs(env["CELERY_TEST_STARTS"]) if (r.number, r.delivery_count) not in done]
            return bool(running)

        wait_until(a_task_running, 60, "a task running")
        os.kill(running[-1].pid, signal.SIGKILL)  # the latest started: the most of its 0.5 s left
        wait_until(lambda: set(done_numbers(env["CELERY_TEST_OUT"])) >= set(range(tasks)), 90,
                   "every task to run, the lost one again")
        log = (Path(env["CELERY_TEST_LOGS"]) / "w1.log").read_text()
        assert "WorkerLostError" in log  # Celery saw the child die and rejected its task with requeue
        assert max(r.delivery_count for r in runs(env["CELERY_TEST_OUT"])) == 2


def test_a_task_that_kills_its_pool_child_stops_at_max_deliveries_on_the_dead_letter_topic(
        kombu_config: Config, celery_env: dict[str, str]) -> None:
    """Each requeue of the lost task is a delivery: with max_deliveries 3 the tracker dead-letters it after its
    third run instead of handing it to the worker for ever; the other tasks run."""
    config = kombu_config.replace(max_deliveries=3)
    env = {**celery_env, **env_for(config), "CELERY_TEST_VISIBILITY_S": "600", "CELERY_TEST_KILLERS": "0"}
    with celery_run(env, tracker=config) as (app, workers):
        workers.start("w1", 1)
        for number in range(3):
            app.send_task(TASK, args=[number])
        queue = env["CELERY_TEST_PREFIX"] + env["CELERY_TEST_QUEUE"]

        def dead_letters() -> list[dict[str, object]]:
            listed = run_kmq(config, "dlq", "list", queue, "--json")
            return json.loads(listed.stdout) if listed.returncode == 0 else []  # type: ignore[no-any-return]

        wait_until(lambda: dead_letters() and set(done_numbers(env["CELERY_TEST_OUT"])) >= {1, 2}, 120,
                   "the killer on the dead-letter topic and the other tasks done")
        [letter] = dead_letters()
        assert (letter["reason"], letter["delivery_count"]) == ("max deliveries (3) reached", 3)
        time.sleep(2)  # a fourth run would come at once
        assert [r.delivery_count for r in runs(env["CELERY_TEST_STARTS"]) if r.number == 0] == [1, 2, 3]


def test_remote_control_and_events_reach_a_worker_and_come_back(kombu_config: Config,
                                                               celery_env: dict[str, str]) -> None:
    """``inspect active`` sees a running task, a revoked countdown task never runs (kmq held it; the worker
    remembers the revoke), and a ``-E`` worker's task events reach an event receiver: all over the broadcast topic."""
    env = {**celery_env, "CELERY_TEST_WORK_S": "3.0"}
    events: list[dict[str, object]] = []
    # The countdown tasks come back through a tracker.
    with celery_run(env, tracker=kombu_config, events=True) as (app, workers):
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
