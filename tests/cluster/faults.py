"""The four faults of a replicated cluster, injected while Traffic flows, and the figures each one leaves.

Each injector kills or stops nodes and waits for Kafka's own failover (the dead node fenced: out of every ISR, its
leaderships and coordinators moved), lets kmq recover, restarts the node and waits until every partition is fully
replicated again. It returns one Fault per interruption, with when it began and when Kafka had failed over.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from kmq import Config
from kmq.testing.cluster import LocalCluster
from kmq.wire import consumer_group
from tests.cluster.analysis import duplicates, late_hand_outs, late_settles, longest_gap_s, recovery_s
from tests.cluster.traffic import Outcome, Traffic
from tests.markers_io import wait_for

#: How long a killed node stays down at most before it is restarted (kmq must have recovered by then).
DOWN_AT_MOST_S = 30.0


@dataclass
class Fault:
    what: str
    node: int
    at: float
    #: When Kafka itself had failed over (the node fenced, or its controlled shutdown done).
    failed_over_at: float
    restarted_at: float = 0.0


@dataclass
class FaultFigures:
    fault: Fault
    failover_s: float
    recovery_s: float | None
    longest_gap_s: float

    @property
    def after_failover_s(self) -> float | None:
        return None if self.recovery_s is None else round(self.recovery_s - self.failover_s, 2)

    def line(self) -> str:
        rec = "not recovered" if self.recovery_s is None else f"{self.recovery_s:.1f} s"
        after = "" if self.after_failover_s is None else f" ({self.after_failover_s:+.1f} s after failover)"
        at = time.strftime("%H:%M:%S", time.gmtime(self.fault.at))
        return (f"{self.fault.what} (node {self.fault.node}, {at}): Kafka failed over in {self.failover_s:.1f} s, "
                f"throughput back in {rec}{after}, longest gap {self.longest_gap_s:.1f} s")


Injector = Callable[[LocalCluster, Config, Traffic], list[Fault]]


def queue_apart_from_controller(cluster: LocalCluster, prefix: str) -> str:
    """A queue name whose consumer group is coordinated by a node other than the active controller, so that a
    coordinator kill and a controller kill are two different faults (each node also leads partitions)."""
    controller = cluster.active_controller()
    for i in range(50):
        name = f"{prefix}-{i}"
        if cluster.coordinator(consumer_group(name)) != controller:
            return name
    raise AssertionError(f"every group tried is coordinated by the controller (node {controller})")


def _recovered(traffic: Traffic, since: float) -> Callable[[], bool]:
    def check() -> bool:
        now = time.time()
        if now < since + 1.5:
            return False
        times = [r.t for r in traffic.runs()]
        return recovery_s(times, since, traffic.rate_per_s, until=now) is not None
    return check


def _kill_and_restart(cluster: LocalCluster, traffic: Traffic, victim: int, what: str) -> Fault:
    at = time.time()
    cluster.kill(victim)
    cluster.wait_fenced(victim)
    fault = Fault(what, victim, at, time.time())
    wait_for(_recovered(traffic, at), DOWN_AT_MOST_S, interval_s=0.5)
    fault.restarted_at = time.time()
    cluster.restart(victim)
    cluster.admin().wait_in_sync(120)
    return fault


def leader_kill(cluster: LocalCluster, config: Config, traffic: Traffic) -> list[Fault]:
    """(a) SIGKILL the node leading the most messages and markers partitions; restart it. Among nodes leading
    as many, one that is neither the active controller nor the queue group's coordinator (faults (b) and (c))."""
    leaders = Counter(cluster.admin().leaders([config.message_topic, config.marker_topic]).values())
    others = {cluster.active_controller(), cluster.coordinator(consumer_group(traffic.queue))}
    victim = max(leaders, key=lambda node: (leaders[node], node not in others))
    return [_kill_and_restart(cluster, traffic, victim, "leader kill")]


def coordinator_kill(cluster: LocalCluster, config: Config, traffic: Traffic) -> list[Fault]:
    """(b) SIGKILL the node coordinating the queue's consumer group, so the coordinator moves; restart it."""
    victim = cluster.coordinator(consumer_group(traffic.queue))
    return [_kill_and_restart(cluster, traffic, victim, "coordinator kill")]


def controller_kill(cluster: LocalCluster, config: Config, traffic: Traffic) -> list[Fault]:
    """(c) SIGKILL the active KRaft controller (a broker too); restart it."""
    victim = cluster.active_controller()
    assert victim is not None, "no active controller found"
    return [_kill_and_restart(cluster, traffic, victim, "controller kill")]


def rolling_restart(cluster: LocalCluster, config: Config, traffic: Traffic) -> list[Fault]:
    """(d) every node in turn as an upgrade does it: SIGTERM (controlled shutdown), start, wait until fully
    replicated, next; the active controller last."""
    controller = cluster.active_controller()
    order = sorted((n.node_id for n in cluster.nodes), key=lambda n: n == controller)
    faults = []
    for node_id in order:
        at = time.time()
        cluster.stop_node(node_id)
        fault = Fault("rolling restart", node_id, at, time.time())
        fault.restarted_at = time.time()
        cluster.restart(node_id)
        cluster.admin().wait_in_sync(120)
        wait_for(_recovered(traffic, at), DOWN_AT_MOST_S, interval_s=0.5)
        faults.append(fault)
    return faults


def figures(faults: list[Fault], outcome: Outcome, rate_per_s: float, end: float) -> list[FaultFigures]:
    """Per fault: Kafka's failover time, kmq's recovery (until the next fault at most) and the longest gap."""
    times = [r.t for r in outcome.runs]
    out = []
    for i, fault in enumerate(faults):
        until = faults[i + 1].at if i + 1 < len(faults) else end
        out.append(FaultFigures(fault, round(fault.failed_over_at - fault.at, 2),
                                recovery_s(times, fault.at, rate_per_s, until=until),
                                longest_gap_s(times, fault.at, until)))
    return out


def summary(name: str, outcome: Outcome, faults: list[FaultFigures]) -> list[str]:
    late = late_hand_outs(outcome.runs, outcome.markers)
    unhealthy = sorted({f"{h.name.split('-')[0]}: {h.body}" for h in outcome.health if h.status != 200})
    lines = [f"{name}: {len(outcome.confirmed):,} confirmed, {len(outcome.handled & outcome.confirmed):,} handled, "
             f"{duplicates(outcome.runs)} duplicate runs, {len(late)} handed out after their deadline"
             + (f" (latest {max(s for _r, s in late):.1f} s late)" if late else "")
             + f", {outcome.dead_letters} dead-lettered"]
    settled_late = late_settles(outcome.runs, outcome.markers)
    if settled_late:
        lines.append(f"  duplicates: the first delivery's ack was appended {settled_late[0]:+.1f} to "
                     f"{settled_late[-1]:+.1f} s after its deadline (an ack held by the failover)")
    lines += [f"  {f.line()}" for f in faults]
    lines += [f"  /healthz said: {u}" for u in unhealthy[:6]]
    return lines
