"""Delivery, the Future-like handle send_async returns (no broker: reports are set by hand)."""

from __future__ import annotations

import threading
import time

import pytest

from kmq import Delivery, DeliveryError, MessageId


def test_a_waiter_is_woken_by_the_report_from_another_thread() -> None:
    delivery: Delivery[MessageId] = Delivery()
    threading.Timer(0.05, delivery._set, args=(MessageId(1, 2), None)).start()
    assert delivery.result(5) == MessageId(1, 2) and delivery.done()


def test_a_failed_delivery_raises_its_error_and_reports_it() -> None:
    delivery: Delivery[MessageId] = Delivery()
    error = DeliveryError("broker said no")
    delivery._set(None, error)
    assert delivery.exception(0) is error
    with pytest.raises(DeliveryError, match="broker said no"):
        delivery.result(0)


def test_waiting_without_a_report_times_out() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        Delivery().result(0.05)
    assert time.monotonic() - started < 2


def test_callbacks_run_once_whether_added_before_or_after_the_report() -> None:
    delivery: Delivery[MessageId] = Delivery()
    seen: list[str] = []
    delivery.add_done_callback(lambda d: seen.append("before"))
    delivery._set(MessageId(0, 0), None)
    delivery.add_done_callback(lambda d: seen.append("after"))
    assert seen == ["before", "after"]


def test_a_delivery_says_what_it_is_in_its_repr() -> None:
    delivery: Delivery[MessageId] = Delivery()
    assert repr(delivery) == "<Delivery pending>"
    delivery._set(MessageId(3, 42), None)
    assert repr(delivery) == "<Delivery done: 3:42>"
    failed: Delivery[MessageId] = Delivery()
    failed._set(None, DeliveryError("broker gone"))
    assert repr(failed) == "<Delivery failed: broker gone>"
