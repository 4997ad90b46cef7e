"""Quiet faults on one broker: freezes (SIGSTOP/SIGCONT) of the broker, the tracker and a worker, and network
partitions (a worker, the tracker, a flapping link), each under load: a paced producer, two workers, one tracker.

Each run checks, against the handlers' own log: nothing lost; every duplicate explained (a zombie worker's run, or
a run caught by the outage); redelivery within the redelivery timeout plus REDELIVERY_BOUND_S of the fault; no
process spinning (CPU over the fault); /readyz not ok while the faulted part is down and ok once it is back; and
the figures go to $FAULT_RESULTS for the table in docs/guides/operations.md.

Durations: 5 s (below the session and redelivery timeouts: invisible) and 30 s (beyond the 10 s session and the
8 s redelivery timeout used here, as 120 s is beyond production's 45 s and 60 s); a 120 s broker freeze with
production's timeouts runs with FAULT_LONG=1 (it adds minutes and no new path).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmq import Config
from kmq.testing.broker import LocalKafka
from kmq.testing.faults.netns import Lab, Namespace
from tests.faults.rig import (
    REDELIVERY_BOUND_S,
    REDELIVERY_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    SPIN_PCT,
    Rig,
    Verdict,
    drain_s,
)

pytestmark = pytest.mark.timeout(600)

LONG = os.environ.get("FAULT_LONG") == "1"


def _config(broker: LocalKafka, name: str, **fields: object) -> Config:
    uid = uuid.uuid4().hex[:6]
    return Config(bootstrap_servers=broker.bootstrap_servers, message_topic=f"f-{name}-{uid}.messages",
                  marker_topic=f"f-{name}-{uid}.markers", tracker_group=f"f-{name}-{uid}-trackers",
                  redelivery_timeout_ms=REDELIVERY_TIMEOUT_MS, unassigned_unhealthy_ms=5_000,
                  unassigned_exit_ms=60_000,
                  consumer_kafka={"session.timeout.ms": str(SESSION_TIMEOUT_MS), "heartbeat.interval.ms": "1000"},
                  **fields)  # type: ignore[arg-type]


@pytest.fixture
def rig_for(broker: LocalKafka, tmp_path: Path) -> Iterator[object]:
    made: list[Rig] = []

    def make(name: str, *, worker_ns: list[Namespace | None] | None = None, tracker_ns: Namespace | None = None,
             **fields: object) -> Rig:
        rig = Rig(_config(broker, name, **fields), f"q-{name}", tmp_path, worker_ns=worker_ns or [None, None],
                  tracker_ns=tracker_ns, bootstrap_for=broker.namespace_bootstrap)  # type: ignore[attr-defined]
        made.append(rig)
        return rig.start()

    yield make
    for rig in made:
        rig.stop_all()


def _checked(verdict: Verdict, results: list[dict[str, object]], *, down: list[str] = (),  # type: ignore[assignment]
             since_fault_start: bool = False) -> Verdict:
    """The checks every fault shares."""
    results.append(verdict.__dict__)
    assert verdict.sent > 100, "the producer sent through the run"
    assert not verdict.lost, f"lost: {verdict.lost}"
    assert not verdict.unexplained, f"duplicates nothing explains: {verdict.unexplained}"
    assert verdict.recovered_s is not None, "the messages sent before the fault ended were not all handled"
    spinning = {n: pct for n, pct in verdict.cpu_fault_pct.items() if pct > SPIN_PCT}
    assert not spinning, f"spinning during the fault (% of a core): {spinning}; busiest threads {verdict.hot_threads}"
    not_ok = {n: h for n, h in verdict.health_after.items() if not h.startswith("200")}
    assert not not_ok and verdict.healthy_s is not None, f"not healthy once the fault was over: {not_ok}"
    for name in down:
        during = verdict.health_during.get(name, [])
        assert any(not h.startswith("200") for h in during), f"{name} said ok throughout the fault: {during}"
    return verdict


def _within_bound(verdict: Verdict, fault_s: float, since_fault_start: bool, extra_s: float = 0.0) -> None:
    """Redelivered runs came within the redelivery timeout plus REDELIVERY_BOUND_S of the fault's end, and the
    messages a faulted worker was running within that of the fault's start (``since_fault_start``: they are owed
    from the moment it went silent); every retry came back within REDELIVERY_BOUND_S of its due time or of the
    fault's end, whichever is later; ``extra_s`` for what a fault adds beyond (requests in flight to a broker cut off
    wait socket.timeout.ms)."""
    bound = REDELIVERY_TIMEOUT_MS / 1000 + REDELIVERY_BOUND_S + extra_s
    if verdict.redelivery_s is not None:
        last = verdict.redelivery_s
        assert last <= bound + fault_s, f"last redelivery {last} s after the fault began"
    if since_fault_start and verdict.zombie_redelivery_s is not None:
        assert verdict.zombie_redelivery_s <= bound, \
            f"the faulted worker's last message redelivered {verdict.zombie_redelivery_s} s after the fault began"
    assert verdict.retry_lag_s is not None, "retries were made and came back"
    bound = fault_s + REDELIVERY_BOUND_S + extra_s
    assert verdict.retry_lag_s <= bound, f"a retry came back {verdict.retry_lag_s} s late (bound {bound} s)"


# --- freezes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [5, 30, *([120] if LONG else [])])
def test_a_frozen_broker(broker: LocalKafka, rig_for: object, results: list[dict[str, object]],
                         seconds: int) -> None:
    rig: Rig = rig_for(f"broker{seconds}")  # type: ignore[operator]
    time.sleep(8)
    assert broker.process is not None
    java = broker.process.pid
    with rig.during():
        os.kill(java, 19)  # SIGSTOP: a GC pause, a VM freeze
        try:
            time.sleep(seconds)
        finally:
            os.kill(java, 18)
    verdict = _checked(rig.finish(f"broker frozen {seconds} s", faulted_pids=set()), results,
                       down=["tracker", "worker-1", "worker-2"] if seconds >= 30 else [])
    # Every member back in its group: a worker librdkafka left out of it after the thaw (until the run ended, 1 run
    # in 4) joins again with a new group consumer once its coordinator has said so for 5 s (QueueRejoin).
    assert verdict.healthy_s is not None and verdict.healthy_s <= REDELIVERY_BOUND_S, \
        f"not every process ready within {REDELIVERY_BOUND_S} s of the thaw: {verdict.ready_after}"
    # Nothing could be consumed while the broker was stopped: a retry's copy waits behind what was sent meanwhile.
    _within_bound(verdict, seconds, since_fault_start=False, extra_s=drain_s(seconds))
    assert not verdict.exits, f"a process exited: {verdict.exits}"


def test_a_frozen_tracker(rig_for: object, results: list[dict[str, object]]) -> None:
    rig: Rig = rig_for("tracker30")  # type: ignore[operator]
    time.sleep(8)
    tracker = rig.procs["tracker"]
    with rig.during(), tracker.frozen():
        time.sleep(30)
    verdict = _checked(rig.finish("tracker frozen 30 s", faulted_pids=set()), results, down=["tracker"])
    _within_bound(verdict, 30, since_fault_start=False)
    assert verdict.duplicates == 0, "a frozen tracker redelivers nothing twice"


def test_a_frozen_worker_is_a_zombie_whose_messages_are_redelivered_and_whose_late_acks_are_counted(
        rig_for: object, results: list[dict[str, object]]) -> None:
    rig: Rig = rig_for("worker30")  # type: ignore[operator]
    time.sleep(8)
    worker = rig.procs["worker-1"]
    with rig.during(), worker.frozen():
        time.sleep(30)
    verdict = _checked(rig.finish("worker frozen 30 s", faulted_pids={worker.pid}), results, down=["worker-1"])
    _within_bound(verdict, 30, since_fault_start=True)
    assert verdict.duplicates >= 1 and set(verdict.explained) <= {"zombie", "outage", "retry", "Start rewound"}
    assert verdict.late_acks >= 1, "the zombie's acks after its deadline are counted"


# --- partitions ----------------------------------------------------------------------------------------------


def test_a_worker_cut_off_from_the_broker(lab: Lab, rig_for: object, results: list[dict[str, object]]) -> None:
    rig: Rig = rig_for("wpart30", worker_ns=[lab.namespaces["w"], None])  # type: ignore[operator]
    time.sleep(8)
    with rig.during(), lab.partitioned(lab.namespaces["w"]):
        time.sleep(30)
    verdict = _checked(rig.finish("worker cut off 30 s", faulted_pids={rig.procs["worker-1"].pid}), results,
                       down=["worker-1"])
    _within_bound(verdict, 30, since_fault_start=True)


def test_a_tracker_cut_off_from_the_broker(lab: Lab, rig_for: object, results: list[dict[str, object]]) -> None:
    rig: Rig = rig_for("tpart30", tracker_ns=lab.namespaces["t"])  # type: ignore[operator]
    time.sleep(8)
    with rig.during(), lab.partitioned(lab.namespaces["t"]):
        time.sleep(30)
    verdict = _checked(rig.finish("tracker cut off 30 s", faulted_pids=set()), results, down=["tracker"])
    _within_bound(verdict, 30, since_fault_start=False)
    assert verdict.duplicates == 0, "a tracker cut off redelivers nothing twice"


def test_a_flapping_worker_link(lab: Lab, rig_for: object, results: list[dict[str, object]]) -> None:
    rig: Rig = rig_for("flap", worker_ns=[lab.namespaces["w"], None])  # type: ignore[operator]
    time.sleep(8)
    with rig.during():
        lab.flap(lab.namespaces["w"], down_s=2.0, up_s=3.0, cycles=8).join()
    verdict = _checked(rig.finish("worker link flapping (2 s down, 3 s up, 8 times)",
                                  faulted_pids={rig.procs["worker-1"].pid}), results)
    _within_bound(verdict, 40, since_fault_start=True)
