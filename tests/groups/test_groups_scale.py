"""Message groups at the issue's scale (``make test-groups``): 200 groups x 50 messages, three ``kmq worker``
processes, one SIGKILLed mid-run and a fourth added later; plain, with releases after a delay, and with handlers past
their time limit. The oracle is the handlers' own log (tests.group_handlers): in every group the messages ran in
send order, never two of one group at once, nothing lost. Figures are printed, never asserted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.group_handlers import GroupOracle
from tests.group_runs import GroupRun
from tests.helpers import ConfigFactory

pytestmark = pytest.mark.timeout(600)

GROUPS, PER_GROUP = 200, 50


@pytest.mark.parametrize("mode", ["", "release", "time-limit"])
def test_200_groups_of_50_under_three_workers_one_killed_and_one_added(
    kmq_config: ConfigFactory, mode: str, tmp_path: Path,
) -> None:
    config = kmq_config(partitions=12, redelivery_timeout_ms=4000,
                        consumer_kafka={"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000"})
    total = GROUPS * PER_GROUP
    with GroupRun(config, tmp_path, mode=mode, work_s=0.01, concurrency=16) as run:
        stats = run.go(groups=GROUPS, per_group=PER_GROUP, workers=3, kill_after=total // 4,
                       add_after=total // 2, timeout_s=int(os.environ.get("KMQTEST_GROUPS_TIMEOUT_S", "500")))
    oracle: GroupOracle = stats.pop("oracle")  # type: ignore[assignment]
    figures = oracle.check(GROUPS, PER_GROUP)
    print(f"\n200x50 groups, mode={mode or 'plain'}: {figures}, {stats}, cut short by the kill: "
          f"{len(oracle.cut_short())}")
    assert stats["killed"] == 1 and stats["added"] == 1
