"""A replicated Apache Kafka cluster on 127.0.0.1: three combined KRaft nodes from the broker's Maven jars.

What production looks like, for fault tests: replication factor 3, ``min.insync.replicas`` 2, unclean leader
election off, internal topics RF 3, a static three-voter controller quorum (every node is broker and controller,
formatted with one shared cluster id). Handles kill (SIGKILL), stop (SIGTERM) and restart one node, and find a
partition's leader, a group's coordinator and the active controller.

Three ways to use it: ``with LocalCluster() as cluster: cluster.bootstrap_servers``; the session fixture in
``tests/cluster/conftest.py``; and ``python -m kmq.testing.cluster up|down|status|kill N|stop N|restart N``
(``make cluster-up``), whose nodes outlive the command and are found again through a state file.
``LocalCluster(secure=True)`` (in-process only) secures every node as ``LocalKafka(secure=True)`` does: SASL_SSL for
clients, TLS with the nodes' certificate between them, and the StandardAuthorizer.

Failover speed: Kafka moves a dead broker's leaderships and drops it from every ISR when the controller *fences*
it, ``broker.session.timeout.ms`` after its last heartbeat (default 9 s). Until then every acks=all write to a
partition it follows waits, and every request to a partition it leads fails. ``FAILOVER_SETTINGS`` shortens that
for tests; see docs-drafts/cluster.md for the reasoning and production values.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kmq.testing.broker import (
    KAFKA_VERSION,
    BrokerError,
    fetch_jars,
    format_storage,
    free_port,
    jvm_command,
    log4j2_properties,
    new_cluster_id,
    render_properties,
    run_dir,
    server_properties,
)
from kmq.testing.cluster_admin import ClusterAdmin
from kmq.testing.cluster_node import ClusterNode
from kmq.testing.security import Security

CLUSTER_HEAP = "512m"
#: Faster than Kafka's defaults (9000 / 2000 / 30000 ms), still safe on a loaded 2-core machine: a broker is
#: fenced after 4 s without a heartbeat (8 missed), and a live follower that stops fetching leaves the ISR after 10 s.
FAILOVER_SETTINGS = {
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "10000",
}


def node_properties(node_id: int, port: int, controller_port: int, voters: str, data_dir: Path, size: int,
                    overrides: Mapping[str, str] | None = None, host: str = "127.0.0.1") -> dict[str, str]:
    """One combined node of a ``size``-node cluster: replicated like production (RF 3, min ISR 2 from 3 nodes)."""
    rf = str(min(3, size))
    min_isr = str(max(1, min(3, size) - 1))
    props = server_properties(port, controller_port, data_dir, host=host)
    del props["controller.quorum.bootstrap.servers"]  # a static quorum: the voters are named, not discovered
    props.update({
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "num.io.threads": "2",
        **FAILOVER_SETTINGS,
    })
    props.update(overrides or {})
    return props


@dataclass
class LocalCluster:
    """``size`` KRaft nodes (3 by default); a context manager that leaves no JVM behind."""

    size: int = 3
    version: str = KAFKA_VERSION
    heap: str = CLUSTER_HEAP
    start_timeout_s: float = 120.0
    detached: bool = False
    overrides: dict[str, str] = field(default_factory=dict)
    work_dir: Path | None = None
    #: Node id → the address it listens on and advertises (default 127.0.0.1), and the command prefix that starts
    #: it (``ip netns exec NS``: a node in a network namespace, for partitions; kmq.testing.faults).
    hosts: dict[int, str] = field(default_factory=dict)
    launch_prefix: dict[int, list[str]] = field(default_factory=dict)
    #: SASL_SSL (SCRAM-SHA-512) for clients, TLS between the nodes, the StandardAuthorizer (kmq.testing.security).
    secure: bool = False
    nodes: list[ClusterNode] = field(default_factory=list, init=False)
    start_seconds: float = field(default=0.0, init=False)
    #: With ``secure``: the CA, the nodes' certificate and the super user (made at start).
    security: Security | None = field(default=None, init=False)

    def admin_settings(self) -> dict[str, str]:
        """librdkafka settings of a client with every right: the super user's on a secured cluster."""
        return self.security.admin_settings() if self.security is not None else {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise BrokerError(f"no node {node_id} in this cluster (nodes {[n.node_id for n in self.nodes]})")

    def start(self) -> LocalCluster:
        java = shutil.which("java")
        if java is None:
            raise BrokerError("Java is not on PATH: the local Kafka cluster needs Java 17 or newer")
        libs = fetch_jars(self.version)
        started = time.monotonic()
        self.work_dir = self.work_dir or Path(tempfile.mkdtemp(prefix="kmq-cluster-"))
        ports = [(free_port(), free_port()) for _ in range(self.size)]
        voters = ",".join(f"{i}@{self.hosts.get(i, '127.0.0.1')}:{c}" for i, (_p, c) in enumerate(ports, start=1))
        cluster_id = new_cluster_id()
        if self.secure:
            if self.detached:
                raise BrokerError("a secured cluster runs in-process only (its super user's password is not kept)")
            self.security = Security.create(self.work_dir / "security")
        formats = []
        for node_id, (port, ctrl) in enumerate(ports, start=1):
            node_dir = self.work_dir / f"node-{node_id}"
            node_dir.mkdir(parents=True, exist_ok=True)
            props_file = node_dir / "server.properties"
            host = self.hosts.get(node_id, "127.0.0.1")
            secured = self.security.server_properties(port, free_port(), ctrl) if self.security else {}
            props_file.write_text(render_properties(node_properties(
                node_id, port, ctrl, voters, node_dir / "data", self.size, {**secured, **self.overrides}, host)))
            log4j = node_dir / "log4j2.properties"
            log4j.write_text(log4j2_properties(node_dir / "broker.log"))
            jvm = jvm_command(java, self.heap, log4j, libs)
            formats.append((jvm, props_file))
            command = [*self.launch_prefix.get(node_id, []), *jvm, "kafka.Kafka", str(props_file)]
            self.nodes.append(ClusterNode(node_id, port, ctrl, node_dir, command, self.detached, host=host))
        _format_all(formats, cluster_id, self.security)
        try:
            for node in self.nodes:
                node.launch()
            self.wait_ready(self.start_timeout_s)
            self.admin().create_offsets_topic(self.bootstrap_servers)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    # --- faults -------------------------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        self.node(node_id).kill()

    def stop_node(self, node_id: int) -> None:
        self.node(node_id).stop()

    def restart(self, node_id: int, *, timeout_s: float = 90.0) -> None:
        """Starts a stopped or killed node again on its ports and data, and waits until it serves clients."""
        node = self.node(node_id)
        node.stop()
        node.launch()
        self.wait_ready(timeout_s)

    def wait_fenced(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Until the controller has fenced a dead node: the cluster no longer lists it, and its leaderships and
        ISR places go to the others (Kafka's own failover, the best a client can wait for)."""
        deadline = time.monotonic() + timeout_s
        while node_id in self.admin().brokers(max(1.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                raise BrokerError(f"node {node_id} still listed as a live broker after {timeout_s:.0f}s")
            time.sleep(0.05)

    # --- where things are ------------------------------------------------------------------------------------

    def admin(self) -> ClusterAdmin:
        """Leaders, ISRs, coordinators and live brokers, asked of the live nodes (a new client each time: cheap,
        never stale)."""
        live = [n.address for n in self.nodes if n.alive]
        return ClusterAdmin(",".join(live) or self.bootstrap_servers, self.admin_settings())

    def active_controller(self) -> int | None:
        return quorum_leader(self.nodes)

    def leader(self, topic: str, partition: int) -> int:
        return self.admin().leader(topic, partition)

    def coordinator(self, group: str) -> int:
        return self.admin().coordinator(group)

    def wait_ready(self, timeout_s: float) -> None:
        """Until every node serves clients (a KRaft broker opens its client port once it has caught up with the
        metadata and been unfenced) and lists itself as a live broker."""
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            while True:
                if not node.alive:
                    raise BrokerError(f"Kafka node {node.node_id} is not running:\n{node.log_tail()}")
                with contextlib.suppress(BrokerError):
                    if node.node_id in ClusterAdmin(node.address, self.admin_settings()).brokers(2.0):
                        break
                if time.monotonic() >= deadline:
                    raise BrokerError(f"Kafka node {node.node_id} not ready within {timeout_s:.0f}s:\n"
                                      f"{node.log_tail()}")
                time.sleep(0.1)

    def stop(self, timeout_s: float = 30.0) -> None:
        for node in self.nodes:  # all at once: a node stopping alone would wait for its leaderships to move
            if node.alive and node.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGTERM)
        for node in self.nodes:
            node.stop(timeout_s)
        if self.work_dir is not None and not self.detached:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- a cluster started by another command (make cluster-up) --------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {"bootstrap": self.bootstrap_servers, "dir": str(self.work_dir), "version": self.version,
                "nodes": [{"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port,
                           "work_dir": str(n.work_dir), "command": n.command, "pid": n.pid, "host": n.host}
                          for n in self.nodes]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> LocalCluster:
        cluster = cls(size=len(state["nodes"]), detached=True, work_dir=Path(state["dir"]), version=state["version"])
        cluster.nodes = [ClusterNode(int(n["node_id"]), int(n["port"]), int(n["controller_port"]), Path(n["work_dir"]),
                                     list(n["command"]), True, n["pid"], host=n.get("host", "127.0.0.1"))
                         for n in state["nodes"]]
        return cluster


def _format_all(formats: list[tuple[list[str], Path]], cluster_id: str, security: Security | None) -> None:
    """Formats every node's storage with the same cluster id, in parallel (each is a JVM start)."""
    with ThreadPoolExecutor(len(formats)) as pool:
        for result in [pool.submit(format_storage, jvm, props, cluster_id, standalone=False, security=security)
                       for jvm, props in formats]:
            result.result()


def quorum_leader(nodes: list[ClusterNode]) -> int | None:
    """The active controller, from the ``quorum-state`` file KRaft keeps in each live node's metadata log dir: the
    leader named with the highest epoch (librdkafka cannot ask the quorum, and in KRaft ``describe_cluster``
    names a random broker as "controller")."""
    best: tuple[int, int] | None = None
    for node in nodes:
        if not node.alive:
            continue
        path = node.work_dir / "data" / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
        if leader >= 0 and (best is None or epoch > best[1]):
            best = (leader, epoch)
    alive = {n.node_id for n in nodes if n.alive}
    return best[0] if best and best[0] in alive else None  # a dead leader: the election is under way

# --- `make cluster-up` / `make cluster-down`: nodes that outlive the command that started them ---------------

def state_file() -> Path:
    return run_dir() / "cluster.json"


def attach() -> LocalCluster | None:
    """The cluster `make cluster-up` started, or None when there is none (its state file is removed when no node
    of it runs any more)."""
    path = state_file()
    if not path.exists():
        return None
    return LocalCluster.from_state(json.loads(path.read_text()))


def _save(cluster: LocalCluster) -> None:
    state_file().parent.mkdir(parents=True, exist_ok=True)
    state_file().write_text(json.dumps(cluster.to_state(), indent=1))


def up(overrides: Mapping[str, str] | None = None) -> str:
    running = attach()
    if running is not None:
        if any(n.alive for n in running.nodes):
            return running.bootstrap_servers
        state_file().unlink()
    work = run_dir() / "cluster"
    shutil.rmtree(work, ignore_errors=True)
    cluster = LocalCluster(detached=True, work_dir=work, overrides=dict(overrides or {})).start()
    _save(cluster)
    print(f"kmq: Kafka {cluster.version} cluster of {cluster.size} nodes up in {cluster.start_seconds:.1f}s, "
          f"logs {work}/node-*/broker.log", file=sys.stderr)
    return cluster.bootstrap_servers


def down() -> bool:
    cluster = attach()
    if cluster is None:
        return False
    cluster.stop()
    shutil.rmtree(cluster.work_dir or "/nonexistent", ignore_errors=True)
    state_file().unlink()
    return True


def status(cluster: LocalCluster) -> str:
    controller = cluster.active_controller()
    lines = [cluster.bootstrap_servers]
    for n in cluster.nodes:
        role = " (active controller)" if n.node_id == controller else ""
        lines.append(f"node {n.node_id} {n.address} {'up' if n.alive else 'down'}{role}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kmq.testing.cluster",
                                     description="Run a local three-node Kafka cluster from Maven jars.")
    parser.add_argument("command", choices=["up", "down", "status", "kill", "stop", "restart"])
    parser.add_argument("node", nargs="?", type=int, help="node id (1-3) for kill, stop and restart")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every node (up only), e.g. broker.session.timeout.ms=9000")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set if "=" in item)
    if len(overrides) != len(args.set):
        parser.error("--set takes KEY=VALUE")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... status | head -1`
    try:
        if args.command == "up":
            print(up(overrides))
            return 0
        if args.command == "down":
            print("kmq: cluster stopped" if down() else "kmq: no local cluster was running", file=sys.stderr)
            return 0
        cluster = attach()
        if cluster is None:
            print("down")
            return 1
        if args.command == "status":
            print(status(cluster))
            return 0
        if args.node is None:
            parser.error(f"{args.command} needs a node id")
        if args.command == "kill":
            cluster.kill(args.node)
        elif args.command == "stop":
            cluster.stop_node(args.node)
        else:
            cluster.restart(args.node)
        _save(cluster)
        print(status(cluster))
    except BrokerError as err:
        print(f"kmq: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
