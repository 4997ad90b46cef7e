"""id_ranges: a rewound batch's message ids as runs per partition, in one log line (read back by the fault rig)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmq.client.consumer.start_pipeline import id_ranges
from kmq.wire import MessageId
from tests.faults.rig import parse_id_ranges


def test_runs_collapse_per_partition() -> None:
    ids = [MessageId(3, 38), MessageId(3, 39), MessageId(2, 7), MessageId(3, 40), MessageId(3, 42)]
    assert id_ranges(ids) == "3:38-40,3:42,2:7"
    assert id_ranges([]) == ""


@given(st.sets(st.tuples(st.integers(0, 5), st.integers(0, 300)), max_size=60))
def test_the_runs_name_exactly_the_ids(pairs: set[tuple[int, int]]) -> None:
    assert parse_id_ranges(id_ranges(MessageId(p, o) for p, o in pairs)) == {f"{p}:{o}" for p, o in pairs}
