"""Times the Start pipeline apart, per batch: ``python -m tests.bench.pipeline_timing MODE [N]`` (MODE: ``one``,
receive() + ack(); ``many``, receive_many(500) + ack_many()), against ``KMQ_BOOTSTRAP_SERVERS`` or a broker of its
own, with a tracker running.

Per batch: (a) Start produce → the last delivery report, (b) the commit round trip, (c) hand-out → the
application's last settle of the batch. And the loop thread's time by what it did: fetching, Starting (records →
messages → Start records), waiting for Starts with batches in flight, committing, handing out, waiting for room;
and how long the receiving thread waited for a batch to be handed out (it is idle then: the loop is the bound).
The stamps are wrappers put around the consumer's parts from here: no timing code in the consumer.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from kmq import Config, Service, logs
from kmq.client.consumer import hand_out as hand_out_module
from kmq.client.consumer import poll_loop as poll_loop_module
from kmq.client.consumer import start_pipeline as sp
from kmq.wire import MessageId
from tests.bench import workloads as w

clock = time.perf_counter


class Stamps:
    """What the wrappers record."""

    def __init__(self) -> None:
        self.loop_s: collections.Counter[str] = collections.Counter()
        self.batches: list[dict[str, float]] = []
        #: message id → its batch (index into ``batches``), and per batch the messages not yet settled.
        self.batch_of: dict[MessageId, int] = {}
        self.unsettled: dict[int, int] = {}
        self.depth_at_start: collections.Counter[int] = collections.Counter()
        #: Loop-thread time counts from the application's first message on.
        self.since = float("inf")
        self.commits = 0
        self.until = float("inf")

    def add(self, name: str, began: float, ended: float) -> None:
        """Counts the part of [began, ended] inside the measured run."""
        if began >= self.since and began < self.until:
            self.loop_s[name] += min(ended, self.until) - began


S = Stamps()


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            S.add(name, began, clock())
    return wrapper


def install() -> None:
    original_init = sp.StartPipeline.__init__
    original_start = sp.StartPipeline.start

    def init(self: sp.StartPipeline, **kwargs: Any) -> None:
        commit, hand_out = kwargs["commit"], kwargs["hand_out"]

        def timed_commit(offsets: Any) -> Any:
            began = clock()
            outcome = commit(offsets)
            ended = clock()
            S.add("commit", began, ended)
            if began >= S.since:
                S.commits += 1
            for batch in self._batches:  # the ones this commit covers: from the oldest, while durable
                if not all(d.done() for d in batch.deliveries):
                    break
                stamps = S.batches[batch._timing_index]
                stamps["commit_s"] = ended - began
                stamps["committed_at"] = ended
            return outcome

        def timed_hand_out(messages: list[Any]) -> None:
            began = clock()
            if messages:
                index = S.batch_of.get(messages[0].message_id)
                if index is not None:
                    S.batches[index]["handed_out_at"] = began
            hand_out(messages)
            S.add("hand_out", began, clock())

        original_init(self, **{**kwargs, "commit": timed_commit, "hand_out": timed_hand_out})

    def start(self: sp.StartPipeline, records: list[Any]) -> None:
        S.depth_at_start[len(self._batches)] += 1
        before = len(self._batches)
        began = clock()
        original_start(self, records)
        ended = clock()
        S.add("start", began, ended)
        if len(self._batches) == before:
            return
        batch = self._batches[-1]
        index = len(S.batches)
        batch._timing_index = index  # type: ignore[attr-defined]
        stamps = {"started_at": began, "start_cpu_s": ended - began, "messages": len(batch.messages),
                  "records": len(batch.records), "deliveries": len(batch.deliveries)}
        S.batches.append(stamps)
        for message in batch.messages:
            S.batch_of[message.message_id] = index
        S.unsettled[index] = len(batch.messages)
        left = [len(batch.deliveries)]

        def reported(_delivery: Any) -> None:
            left[0] -= 1
            if left[0] == 0:
                stamps["durable_at"] = clock()

        for delivery in batch.deliveries:
            delivery.add_done_callback(reported)

    sp.StartPipeline.__init__ = init  # type: ignore[method-assign]
    sp.StartPipeline.start = start  # type: ignore[method-assign]
    sp.StartBatch = type("StartBatch", (), {"__init__": _batch_init})  # type: ignore[misc]  # no slots: stamps
    sp._wait_done = _timed("wait_starts", sp._wait_done)
    hand_out_module.HandOut.wait_for_room = _timed("wait_room", hand_out_module.HandOut.wait_for_room)
    hand_out_module.HandOut.wait = _timed("receiver_wait", hand_out_module.HandOut.wait)  # the receiving thread
    poll_loop_module.PollLoop._poll_once = _timed("loop", poll_loop_module.PollLoop._poll_once)
    from kmq.client.consumer import intake
    intake.Intake.fetch = _timed("fetch", intake.Intake.fetch)


def _batch_init(self: Any, records: Any, messages: Any, offsets: Any, deliveries: Any) -> None:
    self.records, self.messages, self.offsets, self.deliveries = records, messages, offsets, deliveries


def settled(messages: list[Any]) -> None:
    now = clock()
    for message in messages:
        index = S.batch_of.pop(message.message_id, None)
        if index is None:
            continue
        S.unsettled[index] -= 1
        if S.unsettled[index] == 0:
            S.batches[index]["settled_at"] = now


@contextlib.contextmanager
def bootstrap() -> Iterator[str]:
    if os.environ.get("KMQ_BOOTSTRAP_SERVERS"):
        yield os.environ["KMQ_BOOTSTRAP_SERVERS"]
        return
    from kmq.testing.broker import LocalKafka
    with LocalKafka() as kafka:
        yield kafka.bootstrap_servers


def run(mode: str, n: int, servers: str) -> None:
    logs.configure("error")
    base = w.group("pipe")
    #: PIPE_TIMING_CONFIG="receive_buffer_capacity=1000,max_in_flight=4000": integer Config fields to try.
    fields = {k: int(v) for k, v in (kv.split("=") for kv in os.environ.get("PIPE_TIMING_CONFIG", "").split(",") if kv)}
    config = Config(bootstrap_servers=servers, message_topic=f"{base}.m", marker_topic=f"{base}.mk",
                    **fields)  # type: ignore[arg-type]
    with w.backlog_with_tracker(config, "q", n) as queue:
        install()
        consumer = Service(config).queue(queue).consumer()
        done, first = 0, None
        while done < n:
            if mode == "one":
                msg = consumer.receive(0.2)
                if msg is None:
                    continue
                msg.ack()
                got = [msg]
            else:
                got = consumer.receive_many(500, 0.2)
                if not got:
                    continue
                consumer.ack_many(got)
            settled(got)
            if first is None:
                first = S.since = clock()
            done += len(got)
        ended = S.until = clock()
        consumer.flush(30)
        consumer.close()
    report(mode, n, ended - (first or ended), first or 0.0)


def report(mode: str, n: int, seconds: float, first: float) -> None:
    batches = [b for b in S.batches if b["started_at"] >= first and "settled_at" in b and "committed_at" in b]
    print(f"{mode} {os.environ.get('PIPE_TIMING_CONFIG', '')}: {n / seconds:,.0f} msgs/s over {seconds:.2f} s; "
          f"{len(batches)} batches, {statistics.mean(b['messages'] for b in batches):.0f} messages per batch; "
          f"load {os.getloadavg()}")

    def row(name: str, values: list[float]) -> None:
        values = sorted(values)
        print(f"  {name:42s} p50 {1e3 * values[len(values) // 2]:7.2f}  p90 {1e3 * values[len(values) * 9 // 10]:7.2f}"
              f"  mean {1e3 * statistics.mean(values):7.2f} ms")

    row("(s) Start: to_message + encode + produce (CPU)", [b["start_cpu_s"] for b in batches])
    row("(a) Start produce -> last delivery report", [b["durable_at"] - b["started_at"] for b in batches])
    row("    durable -> commit begins", [b["committed_at"] - b["commit_s"] - b["durable_at"] for b in batches])
    row("(b) commit round trip", [b["commit_s"] for b in batches])
    row("(c) hand-out -> last settle", [b["settled_at"] - b["handed_out_at"] for b in batches])
    row("    Start -> hand-out", [b["handed_out_at"] - b["started_at"] for b in batches])
    gaps = [b2["started_at"] - b1["started_at"] for b1, b2 in itertools.pairwise(batches)]
    row("    one batch's Start -> the next's", gaps)
    print(f"  pipeline depth when a batch was Started: {dict(sorted(S.depth_at_start.items()))}; "
          f"{S.commits} commits")
    print(f"  loop thread over {seconds:.2f} s (s, share of the run):")
    inner = sum(S.loop_s[k] for k in ("fetch", "start", "wait_starts", "commit", "hand_out", "wait_room"))
    for name in ("loop", "fetch", "start", "wait_starts", "commit", "hand_out", "wait_room"):
        print(f"    {name:12s} {S.loop_s[name]:6.2f}  {100 * S.loop_s[name] / seconds:5.1f}%")
    print(f"    {'other':12s} {S.loop_s['loop'] - inner:6.2f}  {100 * (S.loop_s['loop'] - inner) / seconds:5.1f}%")
    waited = S.loop_s["receiver_wait"]
    print(f"  the receiving thread waited for a hand-out {waited:.2f} s ({100 * waited / seconds:.1f}% of the run)")


if __name__ == "__main__":
    with bootstrap() as servers:
        run(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100_000, servers)
