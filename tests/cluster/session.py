"""The cluster a test session runs on: `make cluster-up`'s (KMQ_CLUSTER_BOOTSTRAP_SERVERS), else one of its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from kmq.testing.broker import BrokerError
from kmq.testing.cluster import LocalCluster, attach


@contextmanager
def session_cluster() -> Iterator[LocalCluster]:
    """The fault tests kill and restart nodes, so a cluster named by address must be one whose nodes this machine
    can find again (`make cluster-up`'s state file)."""
    wanted = os.environ.get("KMQ_CLUSTER_BOOTSTRAP_SERVERS")
    if wanted:
        running = attach()
        if running is None or running.bootstrap_servers != wanted:
            raise BrokerError(f"KMQ_CLUSTER_BOOTSTRAP_SERVERS={wanted} is not the cluster `make cluster-up` started "
                              "(the fault tests kill and restart its nodes, so they need its state file); unset it "
                              "to let the tests start their own")
        yield running
        return
    with LocalCluster() as started:
        print(f"\nkmq: local Kafka cluster {started.bootstrap_servers} started in {started.start_seconds:.1f}s")
        yield started
