"""Message groups under ``kmq worker`` processes on a real broker: workers SIGKILLed and added while they run, with
releases after a delay and handlers past their time limit; the oracle is the handlers' own log
(tests.group_handlers). This is the small version that ``make test`` runs; tests/groups runs 200 groups x 50
messages with three workers (``make test-groups``)."""

from __future__ import annotations

import pytest

from tests.group_handlers import GroupOracle
from tests.group_runs import GroupRun
from tests.helpers import ConfigFactory

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("mode", ["", "release", "time-limit"])
def test_a_worker_killed_and_one_added_keep_every_group_in_order_one_at_a_time_and_lose_nothing(
    kmq_config: ConfigFactory, mode: str, tmp_path: object,
) -> None:
    config = kmq_config(partitions=4, redelivery_timeout_ms=3000,
                        consumer_kafka={"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000"})
    with GroupRun(config, tmp_path, mode=mode, work_s=0.03) as run:  # type: ignore[arg-type]
        stats = run.go(groups=20, per_group=10, workers=2, kill_after=40, add_after=100)
    oracle: GroupOracle = stats.pop("oracle")  # type: ignore[assignment]
    assert stats["killed"] == 1 and stats["added"] == 1
    figures = oracle.check(20, 10)
    # The kill lands while one of the victim's handlers runs (GroupRun.kill_worker waits for one), mostly: timing.
    print(f"groups mode={mode or 'plain'}: {figures}, {stats}, cut short by the kill: {len(oracle.cut_short())}")
    if mode:
        assert figures["not_ok"] > 0, "the misbehaving handler ran"
