"""kmq message groups from Dramatiq: the message option ``message_group`` puts a message in a kmq group, whose
messages Dramatiq's worker (32 threads) then runs in the order they were sent and one at a time."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict

import dramatiq
from dramatiq import Worker
from dramatiq.middleware import CurrentMessage

from kmq.dramatiq import KmqBroker, KmqMessageProxy
from kmq.dramatiq.broker import MESSAGE_GROUP_OPTION


def test_a_message_group_runs_in_send_order_one_at_a_time_under_32_threads(stub_broker: KmqBroker,
                                                                           stub_worker: Worker) -> None:
    stub_broker.add_middleware(CurrentMessage())
    lock = threading.Lock()
    runs: dict[str, list[tuple[int, float, float]]] = defaultdict(list)

    @dramatiq.actor(max_retries=0)
    def charge(n: int) -> None:
        proxy = CurrentMessage.get_current_message()
        assert isinstance(proxy, KmqMessageProxy)
        group = proxy.kmq_message.group or ""
        started = time.monotonic()
        time.sleep(0.01)
        with lock:
            runs[group].append((n, started, time.monotonic()))

    for n in range(15):
        for account in ("account-7", "account-9"):
            charge.send_with_options(args=(n,), **{MESSAGE_GROUP_OPTION: account})
    stub_broker.join(charge.queue_name, timeout=60_000)
    stub_worker.join()
    assert set(runs) == {"account-7", "account-9"}
    for group, done in runs.items():
        assert [n for n, _, _ in done] == list(range(15)), f"{group} ran out of order"
        assert all(b[1] >= a[2] for a, b in itertools.pairwise(done)), f"two runs of {group} at once"
