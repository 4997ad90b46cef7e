"""hypothesis strategies for message lives (kmq.ops.audit.synthetic plans): any mix of retries, releases,
give-backs, delay hops, crashes and tracker copies, dead letters, expiry, purge, both marker formats, Go consumers
and trackers, at-most-once queues. ``normalize`` makes each drawn plan one the components could produce."""

from __future__ import annotations

from hypothesis import strategies as st

from kmq.ops.audit.synthetic import plans as p
from kmq.ops.audit.synthetic.plans import Plan, QueueSpec, Step

QUEUES = (QueueSpec("h-kmq"), QueueSpec("h-go", marker_format="kafka-mq-go"), QueueSpec("h-purge", purge=True),
          QueueSpec("h-go-purge", marker_format="kafka-mq-go", purge=True), QueueSpec("h-amo", at_most_once=True),
          QueueSpec("h-short", redelivery_timeout_ms=2000, max_deliveries=2))
AT_MOST_ONCE = frozenset(q.name for q in QUEUES if q.at_most_once)

steps = st.builds(
    Step,
    outcome=st.sampled_from((*p.SETTLING, *p.TRACKED)),
    tracker=st.sampled_from((p.COPY, p.GO_COPY, p.DEAD, p.TRACKER_PURGE, p.LOST, p.LATE, p.NONE_ALIVE,
                             p.NONE_OVERDUE)),
    go_consumer=st.booleans(), restart=st.booleans(), late_ack=st.booleans(), redrive=st.booleans(),
)

plans = st.builds(
    lambda queue, drawn, never_read, amo, after: p.normalize(Plan(queue, tuple(drawn), never_read=never_read,
                                                                  amo=amo, after_purge=after)),
    queue=st.sampled_from(QUEUES),
    drawn=st.lists(steps, min_size=1, max_size=6),
    never_read=st.integers(0, 7).map(lambda n: n == 0),
    amo=st.sampled_from(p.AMO),
    after=st.booleans(),
)
