"""The fault runs' fixtures: network namespaces for a worker and a tracker, and one broker listening in this host's
namespace (127.0.0.1) and on the host side of each namespace's link, advertising there, so a client in a namespace
reaches it and a partition cuts exactly that client off. Needs root (``ip netns``); every namespace and link made is
removed at the end, on failure too (and a crashed run's by ``sweep`` at the start)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmq.testing.broker import LocalKafka, free_port
from kmq.testing.faults.netns import Lab, leftovers, sweep

RESULTS = Path(os.environ.get("FAULT_RESULTS", "/tmp/kmq-fault-results.jsonl"))


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.fail("the fault runs need root: network namespaces (ip netns) and veth pairs")
    sweep()
    lab = Lab()
    try:
        lab.namespace("w")
        lab.namespace("t")
        yield lab
    finally:
        lab.close()
        assert not leftovers(lab.prefix), f"namespaces or links left behind: {leftovers(lab.prefix)}"


@pytest.fixture(scope="session")
def broker(lab: Lab) -> Iterator[LocalKafka]:
    listeners = {f"NS{name.upper()}": (ns.host_address, free_port()) for name, ns in lab.namespaces.items()}
    kafka = LocalKafka(extra_listeners=listeners).start()
    kafka.namespace_bootstrap = {  # type: ignore[attr-defined]
        lab.namespaces[name.removeprefix("NS").lower()].name: f"{address}:{port}"
        for name, (address, port) in listeners.items()}
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def results() -> Iterator[list[dict[str, object]]]:
    rows: list[dict[str, object]] = []
    yield rows
    RESULTS.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"\nfault results ({len(rows)} runs) in {RESULTS}")
    for row in rows:
        if "duplicates" not in row:
            print(f"  {row}")
            continue
        print(f"  {row['fault']}: sent {row['sent']}, lost {len(row['lost'])}, duplicates {row['duplicates']} "  # type: ignore[arg-type]
              f"{row['explained']}, late acks {row['late_acks']}, redelivery {row['redelivery_s']} s after the "
              f"fault began (the faulted worker's {row['zombie_redelivery_s']} s), retries up to "
              f"{row['retry_lag_s']} s late, backlog {row['recovered_s']} s and all "
              f"ready {row['healthy_s']} s after it ended ({row['ready_after']}); CPU % during "
              f"{row['cpu_fault_pct']}, idle "
              f"{row['cpu_idle_pct']}; health during {row['health_during']}; exits {row['exits']}")
