"""The dedup window decides every record as the rule over the whole log does (docs/concepts/dedup.md), after a
rebuild from one window back as well, and again the same for records it decided already."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from kmq.client.consumer.dedup import DedupWindow, PartitionWindow, dedup_key
from kmq.wire import HEADER_DEDUP_ID, HEADER_FIRST_ID, MessageId

WINDOW = 1000


@dataclass(frozen=True)
class Rec:
    offset: int
    ts: int
    key: bytes


def rule(log: list[Rec], window_ms: int = WINDOW) -> list[int | None]:
    """The rule, straight from its definition: a record repeats the first record of its run when an earlier record
    of its key has a timestamp above its own minus the window; else it starts a run."""
    first_of_run: dict[bytes, int] = {}
    out: list[int | None] = []
    for i, r in enumerate(log):
        if any(e.key == r.key and e.ts > r.ts - window_ms for e in log[:i]):
            out.append(first_of_run[r.key])
        else:
            first_of_run[r.key] = r.offset
            out.append(None)
    return out


def decide(window: PartitionWindow, records: list[Rec]) -> list[int | None]:
    return [None if (m := window.observe(r.offset, r.ts, r.key)) is None else m.offset for r in records]


@st.composite
def logs(draw: st.DrawFn, max_size: int = 60, skew: int = 300) -> list[Rec]:
    """A partition's keyed records: offsets rising with gaps, timestamps rising with jitter (producers' clocks)."""
    n = draw(st.integers(0, max_size))
    keys = draw(st.lists(st.sampled_from([b"a", b"b", b"c", b"order-991"]), min_size=n, max_size=n))
    steps = draw(st.lists(st.integers(0, 700), min_size=n, max_size=n))
    jitter = draw(st.lists(st.integers(-skew, skew), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    out, ts, offset = [], 10_000, 0
    for key, step, jit, gap in zip(keys, steps, jitter, gaps, strict=True):
        ts += step
        offset += gap
        out.append(Rec(offset, ts + jit, key))
    return out


@given(logs())
def test_every_record_is_decided_as_the_rule_over_the_whole_log_says(log: list[Rec]) -> None:
    assert decide(PartitionWindow(0, WINDOW), log) == rule(log)


@given(logs(), st.data())
def test_a_window_rebuilt_from_one_window_and_the_skew_back_decides_later_records_alike(
    log: list[Rec], data: st.DataObject,
) -> None:
    # Given a new owner whose first record to decide is at ``c``, and producers' clocks within the skew
    skew = 300
    c = data.draw(st.integers(0, len(log)))
    if c == len(log):
        return
    since = log[c].ts - WINDOW - skew
    # offsets_for_times: from the earliest record with a timestamp at or after ``since``, up to ``c``
    start = next((i for i, r in enumerate(log[:c]) if r.ts >= since), c)
    rebuilt = PartitionWindow(0, WINDOW, skew, valid_from=log[c].offset)
    decide(rebuilt, log[start:c])
    # When it decides from ``c`` on, it says what the whole log says, for every record whose clock is within the
    # skew of the first one's (the bound the rebuild reads for)
    expected = rule(log)[c:]
    got = decide(rebuilt, log[c:])
    for r, want, have in zip(log[c:], expected, got, strict=True):
        if r.ts >= log[c].ts - skew:
            assert (want is None) == (have is None)


@given(logs(), st.data())
def test_a_record_decided_again_gets_its_answer_or_is_let_through_and_counted(log: list[Rec],
                                                                             data: st.DataObject) -> None:
    window = PartitionWindow(0, WINDOW)
    first = decide(window, log)
    # A batch put back (a failed Start or commit): its records are decided again
    back = data.draw(st.integers(0, len(log)))
    before = window.undecided
    again = decide(window, log[back:])
    for want, have in zip(first[back:], again, strict=True):
        assert have == want or (have is None and window.undecided > before)


def test_a_put_back_batch_across_one_new_run_is_decided_exactly() -> None:
    # Given "a" let through at 1, repeated at 2; the window passes; "a" starts a new run at 3, repeated at 4
    log = [Rec(1, 0, b"a"), Rec(2, 500, b"a"), Rec(3, 5000, b"a"), Rec(4, 5100, b"a")]
    window = PartitionWindow(7, WINDOW)
    assert decide(window, log) == [None, 1, None, 3]
    # When records 2..4 are put back and decided again, then every answer is the first one, none undecided
    assert decide(window, log[1:]) == [1, None, 3]
    assert window.undecided == 0
    assert window.observe(2, 500, b"a") == MessageId(7, 1)


def test_a_repeat_refreshes_the_window_so_a_run_of_close_repeats_lets_one_through() -> None:
    window = PartitionWindow(0, WINDOW)
    # Each 900 ms after the one before, so 2,700 ms after the first: still one run (the window slides)
    assert decide(window, [Rec(i, 900 * i, b"k") for i in range(4)]) == [None, 0, 0, 0]
    # A repeat more than a window after the newest starts a new run
    assert window.observe(10, 900 * 3 + WINDOW, b"k") is None


def test_a_record_from_a_producer_whose_clock_is_behind_still_repeats_a_newer_timestamp() -> None:
    window = PartitionWindow(0, WINDOW)
    assert window.observe(0, 10_000, b"k") is None
    assert window.observe(1, 9_500, b"k") == MessageId(0, 0)  # written later, stamped earlier


@given(logs(max_size=120), st.data())
def test_a_sweep_forgets_only_keys_no_later_record_can_repeat(log: list[Rec], data: st.DataObject) -> None:
    skew = 600  # two records' jitter apart: a later record is at most this much older than the newest
    swept = PartitionWindow(0, WINDOW, skew)
    plain = PartitionWindow(0, WINDOW, skew)
    for r in log:
        if data.draw(st.booleans()):
            swept.sweep()
        assert swept.observe(r.offset, r.ts, r.key) == plain.observe(r.offset, r.ts, r.key)


def test_keys_out_of_the_window_are_swept_as_keys_grow() -> None:
    window = PartitionWindow(0, WINDOW)
    for i in range(20_000):
        window.observe(i, i * 10, f"id-{i}".encode())
    # Every key older than the window (and the skew, 0 here) was forgotten at the sweeps: far fewer than 20,000 stay
    assert len(window) < 5_000


def test_the_key_is_the_dedup_id_of_an_original_send() -> None:
    assert dedup_key([("trace", b"x"), (HEADER_DEDUP_ID, b"order-991")]) == b"order-991"
    assert dedup_key([("trace", b"x")]) is None
    # A tracker's copy or a redrive is a delivery of a message let through, never a duplicate of it
    assert dedup_key([(HEADER_DEDUP_ID, b"order-991"), (HEADER_FIRST_ID, b"0:5")]) is None


def test_a_parked_window_is_revived_only_if_nobody_can_have_decided_past_it() -> None:
    windows = DedupWindow(WINDOW, park=True)
    window = windows.rebuilding(3, 100)
    window.observe(100, 0, b"a")
    window.observe(105, 10, b"b")
    windows.dropped([3])
    assert windows.live == {}
    # Given back untouched: its first keyed record is at most one past what it saw
    assert windows.window_for(3, 104) is window
    windows.dropped([3])
    # Given back after another consumer read past it: rebuilt
    assert windows.window_for(3, 107) is None
    assert windows.window_for(3, 104) is None  # and forgotten


def test_without_parking_a_dropped_partition_is_always_rebuilt() -> None:
    windows = DedupWindow(WINDOW)
    windows.rebuilding(1, 0).observe(0, 0, b"a")
    windows.dropped([1])
    assert windows.window_for(1, 0) is None
