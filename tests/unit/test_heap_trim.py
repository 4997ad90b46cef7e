"""HeapTrim: a trim once every N records folded, counted across polls; none where the C library has no trim."""

from __future__ import annotations

from kmq.redelivery.heap_trim import HeapTrim, _malloc_trim


def test_it_trims_once_every_n_records_folded_across_polls() -> None:
    trims: list[int] = []
    heap = HeapTrim(every=1_000, trim=lambda: trims.append(1))
    for records in (400, 500, 0, 99):
        heap.folded(records)
    assert trims == []
    heap.folded(1)
    assert trims == [1]
    heap.folded(2_500)  # one trim for a poll however large: the count starts again after it
    heap.folded(999)
    assert trims == [1, 1]


def test_glibc_s_malloc_trim_is_found_and_callable_here() -> None:
    trim = _malloc_trim()
    assert trim is not None  # this machine's C library is glibc
    trim()
