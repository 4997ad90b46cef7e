"""The console's pure parts: per-minute series (percentiles, the backlog's base across pruning, rates) and which
dead letters still wait."""

from __future__ import annotations

from kmq.console import series as s
from kmq.console.letters import ANY, REDRIVEN, WAITING, Letter, LetterFilter, Letters
from kmq.console.series import Series
from kmq.wire import MessageId
from kmq.wire import vocabulary as v

T0 = 1_767_225_600_000  # a minute's start
M = s.MINUTE_MS


def test_processing_percentiles_come_from_log_buckets_within_a_quarter() -> None:
    series = Series()
    for ms in range(1, 1001):
        series.processing("q", T0, ms)
    chart = series.chart("q", T0, minutes=2)
    p50, p95, p99 = (chart.processing_ms[p][-1] for p in s.PERCENTILES)
    assert p50 is not None and p95 is not None and p99 is not None
    assert 500 <= p50 <= 500 * s.GROWTH and 950 <= p95 <= 950 * s.GROWTH and 990 <= p99 <= 990 * s.GROWTH
    assert chart.processing_ms[50][0] is None  # no ack in the minute before
    assert series.chart(s.ALL, T0, minutes=1).processing_ms[50] == [p50]


def test_the_backlog_keeps_its_level_when_old_minutes_are_pruned() -> None:
    series = Series(keep_minutes=10)
    series.backlog_change("q", T0, +5)
    series.backlog_change("q", T0 + 3 * M, -2)
    assert series.chart("q", T0 + 5 * M, minutes=6).backlog == [5, 5, 5, 3, 3, 3]
    series.prune(T0 + 30 * M)
    assert series.chart("q", T0 + 30 * M, minutes=2).backlog == [3, 3]
    series.backlog_change("q", T0, -1)  # a change in a pruned minute moves the base
    assert series.chart("q", T0 + 30 * M, minutes=1).backlog == [2]


def test_rates_count_the_last_whole_minutes() -> None:
    series = Series()
    for minute in range(6):
        series.count("q", s.SENT, T0 + minute * M, 60)
    assert series.rate_per_s("q", s.SENT, T0 + 5 * M + 1) == 1.0  # minutes 0-4; minute 5 is under way
    assert series.rate_per_s("other", s.SENT, T0) == 0.0


def _letter(offset: int, first: int, reason: str = "boom", queue: str = "q") -> Letter:
    return Letter(MessageId(0, offset), queue, MessageId(1, first), reason, T0 + offset)


def test_a_letter_waits_while_its_message_is_dead_lettered_and_it_is_the_newest() -> None:
    letters = Letters()
    old, new, other = _letter(0, 10), _letter(1, 10), _letter(2, 11, "timeout")
    for letter in (old, new, other):
        letters.add(letter)
    states = {("q", MessageId(1, 10)): v.DEAD_LETTERED, ("q", MessageId(1, 11)): v.WAITING}  # 11 was redriven

    def state_of(key: tuple[str, MessageId]) -> str | None:
        return states.get(key)

    def chosen(wanted: LetterFilter) -> list[int]:
        return [lt.dlq_id.offset for lt, waits in letters.select(wanted, state_of)
                if wanted.status == ANY or waits == (wanted.status == WAITING)]

    assert chosen(LetterFilter()) == [1]
    assert chosen(LetterFilter(status=REDRIVEN)) == [2, 0]
    assert chosen(LetterFilter(status=ANY, reason="TIME")) == [2]
    letters.set_redriven_up_to("q", {0: 2})  # kmq dlq redrive went past it
    assert chosen(LetterFilter(status=WAITING)) == []


def test_an_idle_instance_holding_nothing_is_forgotten_after_an_hour() -> None:
    from kmq.console.workers import Workers
    from kmq.wire.markers import Marker, MarkerType

    workers = Workers()
    start = Marker(MarkerType.START, MessageId(0, 1), instance_id="web-1:10")
    workers.marker(start, "q", 0, T0)
    workers.marker(Marker(MarkerType.START, MessageId(0, 2), instance_id="web-2:20"), "q", 0, T0)
    workers.marker(Marker(MarkerType.END, MessageId(0, 1), instance_id="web-1:10"), "q", 0, T0 + 1)
    workers.forget_idle(T0 + 2 * 3_600_000)
    assert list(workers.instances) == ["web-2:20"]  # it still holds 0:2
    assert workers.holder(MessageId(0, 2)) is workers.instances["web-2:20"]


def test_a_login_or_an_action_only_sends_the_browser_within_the_site() -> None:
    from kmq.console.web import local_path

    assert local_path("/queue?q=a") == "/queue?q=a"
    for elsewhere in ("//evil.example", "/\\evil.example", "https://evil.example", "", "javascript:alert(1)"):
        assert local_path(elsewhere, "/x") == "/x", elsewhere
