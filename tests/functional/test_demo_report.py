"""The demo's verdict: a job not done by the deadline is "unfinished" when it is still on the topic or in flight,
and "lost" only when it is nowhere a worker would find it; and its crash costs something: the killed worker held
jobs, which the tracker brings back ("after crash" > 0; it was 0 on every run when the kill came too late)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmq import Service
from kmq.demo import report, run
from kmq.ops.stats import Scanner
from kmq.wire import MessageId
from tests.helpers import ConfigFactory, receive_n

pytestmark = pytest.mark.timeout(180)


def test_unfinished_jobs_are_not_called_lost_and_a_vanished_job_is(
    kmq_config: ConfigFactory, capsys: pytest.CaptureFixture[str],
) -> None:
    # Given five jobs: one acked, the rest read and released at close or never read
    config = kmq_config(receive_buffer_capacity=2)
    queue = Service(config).queue("jobs")
    with queue.producer() as producer:
        ids = {producer.send(b"%d" % i) for i in range(5)}
    with queue.consumer() as consumer:
        receive_n(consumer, 1)[0].ack()
    # and one job that is nowhere at all
    vanished = MessageId(0, 10_000)
    with Scanner(config, config.default_topics) as scanner:
        summaries = scanner.read(keep_ids=True)
    assert summaries["jobs"].first_ids["waiting"] or summaries["jobs"].first_ids["overdue"]
    # When the demo reports
    status = report(config, {"jobs": ids | {vanished}}, summaries, duration=1.0)
    # Then only the vanished job is lost, the four others are unfinished, and the demo fails
    out = capsys.readouterr().out
    assert status == 1
    assert "LOST 1 jobs" in out and "UNFINISHED 4 jobs" in out


def test_the_demo_kills_a_worker_that_holds_jobs_and_gets_them_all_back(
    kmq_config: ConfigFactory, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    config = kmq_config(partitions=6, marker_partitions=3, redelivery_timeout_ms=4000, max_deliveries=3)
    status = run(config, tmp_path, jobs_per_queue=1500)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "killed worker 1 (SIGKILL)" in out and "holding" in out, out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("queue "))
    column = header.index("after crash")
    rows = [line for line in lines if line.startswith(("emails ", "thumbnails "))]
    after_crash = [int(row[column:].split()[0].replace(",", "")) for row in rows]
    print(f"after crash: {after_crash}")
    assert len(after_crash) == 2 and sum(after_crash) > 0, out
