"""Wire conventions have one home (kmq/wire/conventions.py): no header name, group name or wall-clock conversion is
spelled anywhere else in kmq, and the conversions there keep their rounding promises."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq import wire
from kmq.wire import conventions

KMQ = Path(__file__).resolve().parents[2] / "kmq"
HOME = KMQ / "wire" / "conventions.py"

#: Literals that belong to the home only: every header name, the group names, the clock probe's key.
WIRE_LITERALS = [re.escape(value) for name, value in vars(conventions).items()
                 if name.startswith("HEADER_") and isinstance(value, str)]
WIRE_LITERALS += [r"kafka-mq-(?!go)", r"kmq-dlq-redrive-", re.escape(wire.CLOCK_PROBE_KEY.decode())]
#: Wall-clock readings and conversions: only the home may make them (one rounding rule each).
CLOCK_ATTRIBUTES = {"time_ns", "fromtimestamp", "utcfromtimestamp", "utcnow"}


def _sources() -> list[Path]:
    return [p for p in KMQ.rglob("*.py") if p != HOME and "_proto" not in p.parts]


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and id(node) not in docstrings:
            text = node.value.decode(errors="replace") if isinstance(node.value, bytes) else node.value
            found += [f"{node.lineno}: literal {pattern!r}" for pattern in WIRE_LITERALS if re.search(pattern, text)]
        elif isinstance(node, ast.Attribute) and node.attr in CLOCK_ATTRIBUTES:
            found.append(f"{node.lineno}: .{node.attr}")
        elif (isinstance(node, ast.Attribute) and node.attr == "time" and isinstance(node.value, ast.Name)
              and node.value.id == "time"):
            found.append(f"{node.lineno}: time.time")
        elif (isinstance(node, ast.BinOp) and isinstance(node.left, ast.Call)
              and isinstance(node.left.func, ast.Attribute) and node.left.func.attr == "timestamp"):
            found.append(f"{node.lineno}: .timestamp() arithmetic")
    return [f"{path.name}:{offence}" for offence in found]


def test_no_wire_literal_or_wall_clock_conversion_is_spelled_outside_its_home() -> None:
    offences = [o for path in _sources() for o in _offences(path)]
    assert offences == [], "use kmq.wire (conventions.py) instead:\n" + "\n".join(offences)


def test_the_rule_catches_what_it_is_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('import time\nH = "kmq-first-message-id"\nnow = int(time.time() * 1000)\n'
                   "def f(d):\n    return d.timestamp() * 1000\n")
    assert len(_offences(bad)) == 3


def test_every_public_convention_is_exported() -> None:
    defined = {n for n, v in vars(conventions).items() if not n.startswith("_")
               and getattr(v, "__module__", conventions.__name__) == conventions.__name__
               and not isinstance(v, type(conventions))}
    assert defined - {"annotations", "UTC"} == set(conventions.__all__)


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)))
def test_a_moment_in_ms_is_never_before_the_moment_and_less_than_a_ms_after(moment: datetime) -> None:
    ms = wire.ms_from_datetime(moment)
    back = wire.datetime_from_ms(ms)
    assert moment <= back < moment + timedelta(milliseconds=1)


def test_a_whole_ms_moment_converts_exactly() -> None:
    # 4.017 * 1000 is 4017.0000000000005 in floats: rounding that up would make a due time 1 ms late.
    assert wire.ms_from_datetime(datetime(1970, 1, 1, 0, 0, 4, 17_000, tzinfo=UTC)) == 4017


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        wire.ms_from_datetime(datetime(2026, 1, 1))


def test_ms_after_is_never_before_now_plus_the_delay() -> None:
    before = wire.now_ms()
    due = wire.ms_after(0.25)
    assert due >= before + 250


def test_a_content_dedup_id_is_the_payload_and_user_headers_in_name_order_and_nothing_else() -> None:
    one = wire.content_dedup_id(b"job", [("b", b"2"), ("a", b"1")])
    assert one == wire.content_dedup_id(b"job", [("a", b"1"), ("b", b"2")]) and one.startswith("sha256:")
    assert one != wire.content_dedup_id(b"job", [("a", b"12")])  # length-prefixed: no two sends encode alike
    assert one != wire.content_dedup_id(b"jo", [("a", b"1"), ("b", b"2b")])


def test_a_deduplicated_end_names_the_message_it_repeats() -> None:
    reason = wire.deduplicated_reason(wire.MessageId(3, 17))
    assert reason == "deduplicated: duplicate of 3:17"
    assert wire.duplicate_of(reason) == wire.MessageId(3, 17) and wire.is_deduplicated(reason)
    assert wire.duplicate_of("rejected") is None and not wire.is_deduplicated("deduplicatedx")


@pytest.mark.parametrize(("dedup_id", "problem"), [("", "empty"), ("x" * 257, "the limit is 256"),
                                                    ("a\nb", "printable"), (5, "must be a string")])
def test_a_bad_dedup_id_is_refused_saying_why(dedup_id: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        wire.validate_dedup_id(dedup_id)
