"""The demo's verdict: a job not done by the deadline is "unfinished" when it is still on the topic or in flight,
and "lost" only when it is nowhere a worker would find it."""

from __future__ import annotations

import pytest

from kmq import Service
from kmq.demo import report
from kmq.ops.stats import Scanner
from kmq.wire import MessageId
from tests.helpers import ConfigFactory, receive_n

pytestmark = pytest.mark.timeout(120)


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
