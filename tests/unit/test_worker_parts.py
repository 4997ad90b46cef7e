"""The worker's parts without a broker: the prefetch window, the dispatcher over fake consumers, the per-thread
metrics as Prometheus exposes them."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from kmq.client.consumer.hand_out import HandOut
from kmq.client.message import Message
from kmq.wire import MessageId
from kmq.worker.dispatch import Dispatcher
from kmq.worker.metrics import ThreadSlot, WorkerMetrics
from kmq.worker.prefetch import PrefetchWindow
from tests.markers_io import wait_for

# --- the prefetch window ------------------------------------------------------------------------------------------


@settings(deadline=None)  # a loaded machine may stall one example
@given(concurrency=st.integers(1, 64), maximum=st.integers(1, 5_000),
       runs=st.lists(st.floats(0, 1_000, allow_nan=False), min_size=1, max_size=30))
def test_the_window_stays_between_the_threads_and_the_maximum(concurrency: int, maximum: int,
                                                              runs: list[float]) -> None:
    sizes: list[int] = []
    window = PrefetchWindow(concurrency, maximum, sizes.append)
    for run_s in runs:
        window.observe(run_s)
        assert concurrency <= window.size <= max(concurrency, maximum)
        assert window.mean_s is not None and window.size == window.size_for(window.mean_s)
    assert sizes == [] or sizes[-1] == window.size


@settings(deadline=None)
@given(concurrency=st.integers(1, 64), a=st.floats(1e-6, 1e4), b=st.floats(1e-6, 1e4))
def test_slower_runs_never_give_a_larger_window(concurrency: int, a: float, b: float) -> None:
    window = PrefetchWindow(concurrency, 2_000, lambda size: None)
    fast, slow = sorted((a, b))
    assert window.size_for(slow) <= window.size_for(fast)


def test_slow_handlers_hold_only_what_runs_and_fast_ones_get_the_whole_pipeline() -> None:
    window = PrefetchWindow(8, 2_000, lambda size: None, horizon_s=0.25)
    assert window.size == 8, "nothing known yet: no more than the threads run"
    window.observe(100.0)
    assert window.size == 8
    window.observe(0.0001)
    for _ in range(60):
        window.observe(0.0001)
    assert window.size == 2_000
    assert PrefetchWindow(8, 2_000, lambda size: None).size_for(0.1) == 8 + 20  # 0.25 s of 8 threads' work


def test_a_run_still_going_shrinks_the_window_before_it_ends() -> None:
    sizes: list[int] = []
    window = PrefetchWindow(4, 2_000, sizes.append)
    window.at_least(5.0)
    assert sizes == [] and window.size == 4, "before any run ended there is nothing to shrink"
    window.observe(0.001)
    assert window.size == 4 + 1000
    window.at_least(10.0)
    assert window.size == 4 and sizes == [1004, 4]
    window.at_least(0.5)  # shorter than the mean: no news
    assert window.size == 4


def test_only_a_lone_thread_takes_batches_of_about_two_ms_of_runs() -> None:
    lone = PrefetchWindow(1, 1000, lambda _size: None)
    assert lone.thread_batch() == 1, "before any run ended nothing is known: one at a time"
    lone.observe(1e-6)
    assert lone.thread_batch() == 64
    lone.observe(1e-3)  # the mean moves a fifth of the way: ~0.2 ms, so ten runs make ~2 ms
    assert lone.thread_batch() == 9
    lone.observe(0.5)
    assert lone.thread_batch() == 1
    several = PrefetchWindow(4, 1000, lambda _size: None)
    several.observe(1e-6)
    assert several.thread_batch() == 1, "a thread must not hold messages while another is idle"


# --- the dispatcher -----------------------------------------------------------------------------------------------


class FakeConsumer:
    """A Consumer's receive(0) and on_ready over a HandOut."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.out = HandOut(capacity=1_000, max_in_flight=1_000)

    def receive(self, timeout: float | None = None) -> Message | None:
        return self.out.take_one()

    def on_ready(self, listener: object) -> None:
        self.out.add_listener(listener)  # type: ignore[arg-type]

    def put(self, first: int, n: int) -> None:
        self.out.put([Message(b"", {}, self.queue, MessageId(0, i), 1, MessageId(0, i), 0,
                              _settler=None)  # type: ignore[arg-type]
                      for i in range(first, first + n)])


def test_waiting_threads_wake_for_any_queue_and_take_one_message_each() -> None:
    consumers = [FakeConsumer("a"), FakeConsumer("b")]
    dispatcher = Dispatcher(consumers)  # type: ignore[arg-type]
    got: list[Message] = []
    lock = threading.Lock()
    release = threading.Event()

    def thread() -> None:
        while (message := dispatcher.next()) is not None:
            with lock:
                got.append(message)
            release.wait(30)  # a busy thread: it takes nothing more meanwhile

    threads = [threading.Thread(target=thread) for _ in range(4)]
    for t in threads:
        t.start()
    consumers[1].put(0, 1)
    consumers[0].put(0, 2)
    assert wait_for(lambda: len(got) == 3, timeout_s=10)
    consumers[1].put(1, 5)
    assert wait_for(lambda: len(got) == 4, timeout_s=10)
    assert sorted(m.queue for m in got) == ["a", "a", "b", "b"], "one message per free thread"
    assert len(consumers[1].out) == 4
    release.set()
    assert wait_for(lambda: len(got) == 8, timeout_s=10)
    dispatcher.stop()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "stop() must end every next()"


def test_looks_at_the_queues_in_turn() -> None:
    consumers = [FakeConsumer("a"), FakeConsumer("b")]
    dispatcher = Dispatcher(consumers)  # type: ignore[arg-type]
    consumers[0].put(0, 10)
    consumers[1].put(0, 10)
    taken = [dispatcher.next() for _ in range(10)]
    assert sorted(m.queue for m in taken if m is not None) == ["a"] * 5 + ["b"] * 5


class BatchConsumer(FakeConsumer):
    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        return self.out.take(max_messages)


def test_a_lone_thread_takes_a_batch_of_one_queue_then_of_the_next() -> None:
    consumers = [BatchConsumer("a"), BatchConsumer("b")]
    dispatcher = Dispatcher(consumers)  # type: ignore[arg-type]
    consumers[0].put(0, 5)
    consumers[1].put(0, 2)
    batches = [[m.queue for m in dispatcher.next_many(4)] for _ in range(3)]
    assert batches == [["a"] * 4, ["b"] * 2, ["a"]]
    waiter: list[list[Message]] = []
    thread = threading.Thread(target=lambda: waiter.append(dispatcher.next_many(4)))
    thread.start()
    consumers[1].put(2, 3)  # wakes the waiting thread
    thread.join(10)
    assert [m.queue for m in waiter[0]] == ["b"] * 3
    dispatcher.stop()
    assert dispatcher.next_many(4) == [] and dispatcher.next_many(1) == []


class Settled:
    """A Message's settler that records what was asked of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def _ack(self, message: Message) -> None:
        self.calls.append(("ack", message.message_id.offset))

    def _give_back(self, message: Message) -> None:
        self.calls.append(("give_back", message.message_id.offset))


def test_a_lone_thread_stopped_mid_batch_runs_what_it_started_and_gives_the_rest_back() -> None:
    from collections import Counter

    from kmq.config import Config
    from kmq.worker.handler_runner import ThreadRunner
    from kmq.worker.handler_runs import HandlerRuns
    from kmq.worker.settle import Backoff, SettlePolicy
    from kmq.worker.time_limit import TimeLimits

    config, settled, counts = Config(bootstrap_servers="x:1"), Settled(), Counter[str]()
    consumer = BatchConsumer("q")
    consumer.out.put([Message(b"", {}, "q", MessageId(0, i), 1, MessageId(0, i), 0, settled)  # type: ignore[arg-type]
                      for i in range(10)])
    window = PrefetchWindow(1, 1000, lambda _size: None)
    window.observe(1e-6)  # fast runs: the thread takes all 10 at once
    dispatcher = Dispatcher([consumer])  # type: ignore[list-item]
    stop = threading.Event()
    ran: list[int] = []

    def handler(message: Message) -> None:
        ran.append(message.message_id.offset)
        if len(ran) == 3:
            stop.set()  # SIGTERM while the third job runs
            dispatcher.stop()

    runs = HandlerRuns(config, handler, None, SettlePolicy(config, Backoff(), WorkerMetrics(["q"]), counts, False),
                       {"q": window}, dispatcher, dispatcher.stop, stop.is_set)
    limits = TimeLimits(runs.time_limit_expired)
    try:
        runs.serve(ThreadSlot("t", ["q"]), ThreadRunner(handler, limits))
    finally:
        limits.close()
    assert ran == [0, 1, 2]
    assert settled.calls == [("ack", 0), ("ack", 1), ("ack", 2), *(("give_back", i) for i in range(3, 10))]
    assert counts == {"acked": 3, "returned": 7}


# --- metrics ------------------------------------------------------------------------------------------------------


def test_thread_tallies_are_summed_into_the_dramatiq_named_metrics() -> None:
    metrics = WorkerMetrics(["q"])
    metrics.slots = [ThreadSlot("t0", ["q"]), ThreadSlot("t1", ["q"])]
    metrics.slots[0].tallies["q"].durations.observe(0.004)
    metrics.slots[0].tallies["q"].durations.observe(0.01)  # on a bound: that bucket ("le")
    metrics.slots[1].tallies["q"].durations.observe(7200)
    metrics.slots[1].tallies["q"].waits.observe(2.0)
    metrics.slots[1].queue = "q"
    text = generate_latest(metrics.registry).decode()
    for line in ('kmq_worker_messages_total{queue="q"} 3.0',
                 'kmq_worker_messages_inprogress{queue="q"} 1.0',
                 'kmq_worker_message_duration_seconds_bucket{le="0.005",queue="q"} 1.0',
                 'kmq_worker_message_duration_seconds_bucket{le="0.01",queue="q"} 2.0',
                 'kmq_worker_message_duration_seconds_bucket{le="3600.0",queue="q"} 2.0',
                 'kmq_worker_message_duration_seconds_bucket{le="+Inf",queue="q"} 3.0',
                 'kmq_worker_message_duration_seconds_count{queue="q"} 3.0',
                 'kmq_worker_message_duration_seconds_sum{queue="q"} 7200.014',
                 'kmq_worker_message_wait_seconds_count{queue="q"} 1.0'):
        assert line in text, line


def test_a_function_decorated_with_queue_worker_stays_callable_and_loads_as_a_handler(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    from kmq import Config, Service
    from kmq.worker import load_handler

    module = tmp_path / "decorated_jobs.py"
    module.write_text(
        "from kmq import Config, Service\n"
        "queue = Service(Config(bootstrap_servers='127.0.0.1:1')).queue('jobs')\n"
        "@queue.worker(concurrency=2)\n"
        "def handle(message):\n"
        "    return ('handled', message)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        queue = Service(Config(bootstrap_servers="127.0.0.1:1")).queue("jobs")

        @queue.worker(concurrency=2)
        def handle(message: object) -> object:
            return ("handled", message)

        assert handle("m") == ("handled", "m")  # type: ignore[arg-type]
        loaded = load_handler("decorated_jobs:handle")
        assert loaded("m") == ("handled", "m")  # type: ignore[arg-type]
        assert not hasattr(loaded, "run"), "the handler, not the Worker"
    finally:
        sys.modules.pop("decorated_jobs", None)
