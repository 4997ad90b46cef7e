"""OffsetPins: the smallest marker offset still holding an in-flight Start, whatever the order Starts end in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmq.redelivery.offset_pins import OffsetPins


def test_a_record_stays_pinned_until_its_last_start_ends() -> None:
    pins = OffsetPins()
    pins.add(7, 2)
    pins.add(9, 1)
    pins.remove(7)
    assert pins.oldest() == 7
    pins.remove(7)
    assert pins.oldest() == 9
    pins.remove(9)
    assert pins.oldest() is None


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 3)), max_size=30), st.randoms(use_true_random=False))
def test_the_oldest_pin_is_the_smallest_offset_with_a_start_left(adds: list[tuple[int, int]], rnd: object) -> None:
    pins, model = OffsetPins(), {}
    for offset, n in adds:
        pins.add(offset, n)
        model[offset] = model.get(offset, 0) + n
    ends = [offset for offset, n in model.items() for _ in range(n)]
    rnd.shuffle(ends)  # type: ignore[attr-defined]
    for offset in ends:
        pins.remove(offset)
        model[offset] -= 1
        assert pins.oldest() == min((o for o, n in model.items() if n), default=None)
