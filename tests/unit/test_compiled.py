"""The compiled hot path (setup.py's HOT_PATH, built by mypyc) against its own source run interpreted.

Each module is imported as the package has it (the mypyc extension when the build compiled it) and loaded a
second time from its ``.py`` under another name; both get the same drawn inputs and must give the same outputs.
The ``.py`` is the reference: an extension older than its source fails here instead of running stale code.
"""

from __future__ import annotations

import ast
import bisect
import collections
import importlib.util
import random
import sys
from collections.abc import Callable
from functools import cache
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Message as KafkaMessage
from hypothesis import example, given, settings
from hypothesis import strategies as st

import kmq.client.consumer.groups.marker_floor as compiled_marker_floor
import kmq.client.consumer.hand_out as compiled_hand_out
import kmq.client.consumer.in_flight as compiled_in_flight
import kmq.client.consumer.intake as compiled_intake
import kmq.client.consumer.late_acks as compiled_late_acks
import kmq.client.consumer.record_messages as compiled_record_messages
import kmq.client.consumer.settle_sink as compiled_settle_sink
import kmq.client.message as compiled_message
import kmq.wire.marker_batch as compiled_marker_batch
import kmq.wire.marker_bytes as compiled_marker_bytes
import kmq.wire.start_refs as compiled_start_refs
import kmq.worker.handler_runs as compiled_handler_runs
import kmq.worker.metrics as compiled_metrics
import kmq.worker.prefetch as compiled_prefetch
import kmq.worker.settle as compiled_settle
from kmq import wire
from kmq.client.consumer.broker_time import BrokerTime
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.config import Config
from kmq.errors import KmqError
from kmq.wire import MessageId
from kmq.wire._proto import kmq_marker_pb2 as pb
from kmq.wire.markers import EndReason, Marker, MarkerType
from tests.unit.fakes import FakeProducer

ROOT = Path(__file__).resolve().parents[2]


def hot_path() -> list[str]:
    """setup.py's HOT_PATH, as module names."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    paths = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "HOT_PATH" for t in node.targets))
    return [p.removesuffix(".py").replace("/", ".") for p in paths]


@cache
def pure(module: ModuleType) -> ModuleType:
    """``module`` loaded again from its ``.py`` (never the extension), as ``_pure_<name>``."""
    name = "_pure_" + module.__name__.replace(".", "_")
    source = ROOT / (module.__name__.replace(".", "/") + ".py")
    loader = SourceFileLoader(name, str(source))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # dataclasses look their module up while the class is made
    loader.exec_module(loaded)
    return loaded


def test_every_hot_path_module_is_checked_here() -> None:
    checked = {m.__name__ for m in (compiled_hand_out, compiled_in_flight, compiled_intake, compiled_late_acks,
                                    compiled_record_messages, compiled_message, compiled_marker_batch,
                                    compiled_marker_bytes, compiled_marker_floor,
                                    compiled_start_refs, compiled_handler_runs, compiled_metrics,
                                    compiled_prefetch, compiled_settle, compiled_settle_sink)}
    assert set(hot_path()) == checked


@pytest.mark.parametrize("module", hot_path())
def test_the_hot_path_is_compiled_whole_and_not_older_than_its_source(module: str) -> None:
    compiled = [m for m in hot_path() if _runs_compiled(m)]
    if not compiled:
        pytest.skip("a pure-Python build (make compiled, or KMQ_COMPILE=1 at install, compiles the hot path)")
    assert module in compiled, f"{module} runs interpreted beside compiled ones: `make compiled` builds it"
    source = ROOT / (module.replace(".", "/") + ".py")
    extensions = sorted(source.parent.glob(source.stem + ".*.so"))
    assert extensions, f"{module} runs compiled but has no extension beside {source}"
    assert extensions[0].stat().st_mtime >= source.stat().st_mtime, (
        f"{extensions[0]} is older than {source}: `make compiled` rebuilds it")


def _runs_compiled(module: str) -> bool:
    # The origin, not the path: mypyc names a module its shared library (kmq/_hot_path__mypyc) loaded as a
    # dependency from the library's folder plus the module's path (kmq/kmq/wire/...). The suffix is right.
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return spec.origin.endswith(".so")


# --- drawn values ----------------------------------------------------------------------------------------------

ids = st.builds(MessageId, st.integers(0, 40), st.integers(0, 2**40))
header_names = st.sampled_from(["trace", "kmq-dedup-id", wire.HEADER_GROUP, wire.HEADER_TIME_LIMIT,
                                wire.HEADER_DELIVER_AT, wire.HEADER_EXPIRES_AT, "x"])
plain_headers = st.dictionaries(header_names, st.binary(max_size=8).filter(lambda b: b.isdigit() or not b),
                                max_size=3)


class Settles:
    """Records what a Message asks of its settler."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def _ack(self, message: Any) -> None:
        self.calls.append(("ack", message.message_id))

    def _release(self, message: Any, delay_ms: int) -> None:
        self.calls.append(("release", message.message_id, delay_ms))

    def _reject(self, message: Any, reason: str) -> None:
        self.calls.append(("reject", message.message_id, reason))

    def _give_back(self, message: Any) -> None:
        self.calls.append(("give_back", message.message_id))

    def _keep_alive(self, message: Any) -> None:
        self.calls.append(("keep_alive", message.message_id))


def fields(message: Any) -> tuple[Any, ...]:
    return (message.payload, message.record_headers, message.queue, message.message_id, message.delivery_count,
            message.first_message_id, message.enqueued_at_ms, message._settled_as, message._next_keep_alive,
            message._deadline_ms)


def both(call: Callable[[ModuleType], Any], module: ModuleType) -> tuple[Any, Any]:
    """``call`` on the compiled module and on its source: each result, or the error type and text it raised."""
    results = []
    for side in (module, pure(module)):
        try:
            results.append(call(side))
        except (KmqError, ValueError) as err:
            results.append((type(err).__name__, str(err)))
    return results[0], results[1]


# --- kmq.client.message ----------------------------------------------------------------------------------------


@given(payload=st.binary(max_size=20), headers=plain_headers, mid=ids, count=st.integers(1, 5), first=ids,
       enqueued=st.integers(0, 2**42), settles=st.lists(st.sampled_from(["ack", "release", "reject", "give_back",
                                                                        "keep_alive"]), max_size=3))
def test_message(payload: bytes, headers: dict[str, bytes], mid: MessageId, count: int, first: MessageId,
                 enqueued: int, settles: list[str]) -> None:
    seen = []
    for side in (compiled_message, pure(compiled_message)):
        settler = Settles()
        msg = side.Message(payload, dict(headers), "q", mid, count, first, enqueued, settler)
        for how in settles:
            getattr(msg, how)(*((0.5,) if how == "release" else ("no",) if how == "reject" else ()))
        seen.append((fields(msg), msg.headers, msg.time_limit, msg.deliver_at_ms, msg.expires_at, msg.group,
                     msg.redelivered, msg.settled, msg.enqueued_at, repr(msg), settler.calls))
    assert seen[0] == seen[1]


# --- kmq.client.consumer.record_messages -----------------------------------------------------------------------

kmq_headers = st.fixed_dictionaries({}, optional={
    wire.HEADER_DELIVERY_COUNT: st.integers(1, 9).map(lambda n: str(n).encode()),
    wire.HEADER_FIRST_ID: ids.map(lambda i: str(i).encode()),
    wire.HEADER_ENQUEUED_AT: st.integers(0, 2**42).map(lambda n: str(n).encode()),
    wire.HEADER_DLQ_REASON: st.just(b"why")})


@st.composite
def records(draw: st.DrawFn) -> KafkaMessage:
    headers = {**draw(plain_headers), **draw(kmq_headers)}
    kind = draw(st.sampled_from([0, 1, 2]))
    return KafkaMessage(topic="m", partition=draw(st.integers(0, 40)), offset=draw(st.integers(0, 2**40)),
                        key=b"q", value=draw(st.binary(max_size=16) | st.none()),
                        headers=list(headers.items()) or draw(st.sampled_from([None, []])),
                        timestamp=(kind, draw(st.sampled_from([-1, 0, 1]) | st.integers(-1, 2**42))))


@settings(max_examples=300)
@given(st.lists(records(), max_size=8), st.floats(0, 1e6))
def test_record_messages(batch: list[KafkaMessage], next_keep_alive: float) -> None:
    settler = Settles()
    made = [side.to_messages(batch, "q", settler, next_keep_alive)
            for side in (compiled_record_messages, pure(compiled_record_messages))]
    assert [fields(m) for m in made[0]] == [fields(m) for m in made[1]]
    assert all(m._settler is settler for m in made[0] + made[1])


# --- kmq.wire.marker_batch and kmq.wire.start_refs -------------------------------------------------------------


class Start:
    def __init__(self, mid: MessageId, payload: bytes, headers: dict[str, bytes], count: int, first: MessageId,
                 enqueued: int) -> None:
        self.message_id, self.payload, self.record_headers = mid, payload, headers
        self.delivery_count, self.first_message_id, self.enqueued_at_ms = count, first, enqueued


#: Few partitions, so that runs of several Starts (delta-coded offsets) are common.
start_ids = st.builds(MessageId, st.integers(0, 3), st.integers(0, 2**40) | st.integers(0, 20))
starts = st.lists(st.builds(Start, start_ids, st.binary(max_size=8), plain_headers, st.integers(1, 4),
                            ids, st.integers(0, 2**42)), max_size=6, unique_by=lambda s: s.message_id)
others = st.lists(st.one_of(
    st.builds(lambda m, d: Marker(MarkerType.KEEPALIVE, m, redeliver_after_ms=d, reason=wire.RELEASE_REASON),
              ids, st.integers(0, 10**6)),
    st.builds(lambda m: Marker(MarkerType.KEEPALIVE, m, reason=wire.RETURN_REASON), ids),
    st.builds(lambda m, r: Marker(MarkerType.END, m, end_reason=EndReason.REJECTED, reason=r), ids,
              st.text(max_size=5)),
), max_size=4)


@given(key=st.binary(min_size=1, max_size=4), after=st.integers(0, 10**6), copies=starts, refs=starts,
       keep_alives=st.lists(ids, max_size=5), acks=st.lists(ids, max_size=5), settles=others,
       owner_tracked=st.booleans(), client_id=st.sampled_from(["", "c1"]))
def test_marker_batch(key: bytes, after: int, copies: list[Start], refs: list[Start], keep_alives: list[MessageId],
                      acks: list[MessageId], settles: list[Marker], owner_tracked: bool, client_id: str) -> None:
    def encode(side: ModuleType) -> tuple[bytes, bytes]:
        return (side.encode_starts(key, after, copies, refs=refs, client_id=client_id, owner_tracked=owner_tracked),
                side.encode_settles(key, after, keep_alives=keep_alives, acks=acks, others=settles,
                                    instance_id=client_id, owner_tracked=owner_tracked))

    records, again = both(encode, compiled_marker_batch)
    assert records == again
    for data in records:
        decoded = both(lambda side, data=data: (list(side.decode_record(data)), list(side.decode_batch(data).starts()),
                                                side.decode_batch(data).keep_alive_columns()), compiled_marker_batch)
        assert decoded[0] == decoded[1]
    assert [compiled_marker_batch.start_size(s) for s in copies] == [pure(compiled_marker_batch).start_size(s)
                                                                     for s in copies]


# --- kmq.client.consumer.groups.marker_floor -------------------------------------------------------------------

floor_steps = st.lists(st.one_of(
    st.tuples(st.just("note"), st.integers(0, 50), st.integers(0, 1000)),
    st.tuples(st.just("at"), st.integers(0, 60)),
    st.tuples(st.just("committed"), st.integers(0, 60)),
), max_size=30)


@given(steps=floor_steps, ids=st.lists(st.builds(MessageId, st.integers(0, 3), st.integers(0, 2**40)), max_size=20))
def test_marker_floor(steps: list[tuple[Any, ...]], ids: list[MessageId]) -> None:
    def run(side: ModuleType) -> tuple[Any, ...]:
        floor, said = side.MarkerFloor(), []
        for step in sorted(steps, key=lambda s: s[2] if s[0] == "note" else 0):  # notes come in markers order
            said.append(getattr(floor, step[0])(*step[1:]))
        return said, len(floor), side.highest_offsets(ids)

    compiled, source = both(run, compiled_marker_floor)
    assert compiled == source


# --- kmq.wire.marker_bytes -------------------------------------------------------------------------------------

any_ids = ids | st.builds(MessageId, st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1))


@given(mid=any_ids, after=st.integers(0, 2**64 - 1), key=st.binary(max_size=6), value=st.binary(max_size=200),
       count=st.integers(0, 2**32 - 1), first=st.none() | any_ids, enqueued=st.integers(0, 2**62),
       headers=st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=4)), max_size=3),
       client_id=st.text(max_size=5), instance_id=st.text(max_size=5))
def test_marker_bytes(mid: MessageId, after: int, key: bytes, value: bytes, count: int, first: MessageId | None,
                      enqueued: int, headers: list[tuple[str, bytes]], client_id: str, instance_id: str) -> None:
    def encode(side: ModuleType) -> tuple[bytes, ...]:
        return (side.encode_start(mid, after, key, value, delivery_count=count, first_message_id=first,
                                  enqueued_at_ms=enqueued, headers=headers, client_id=client_id,
                                  instance_id=instance_id),
                side.encode_end(mid), side.encode_end(mid, instance_id), side.encode_keep_alive(mid, after))

    compiled, source = both(encode, compiled_marker_bytes)
    assert compiled == source


@given(st.binary(max_size=40) | st.builds(
    lambda mid, after, key, value, count, first: compiled_marker_bytes.encode_start(
        mid, after, key, value, delivery_count=count, first_message_id=first, enqueued_at_ms=0, headers=()),
    any_ids, st.integers(0, 2**64 - 1), st.binary(max_size=6), st.binary(max_size=20), st.integers(0, 2**32),
    st.none() | any_ids))
def test_read_plain(data: bytes) -> None:
    compiled, source = both(lambda side: side.read_plain(data), compiled_marker_bytes)
    assert compiled == source


@given(st.binary(max_size=40))
def test_marker_batch_malformed(tail: bytes) -> None:
    for prefix in (compiled_marker_batch.BATCH_PREFIX, compiled_marker_batch.REFS_PREFIX, b"\x00kq", b""):
        data = prefix + tail
        got = both(lambda side, data=data: list(side.decode_record(data)) if side.is_batch(data) else None,
                   compiled_marker_batch)
        assert got[0] == got[1]


def ref_columns(refs: Any) -> tuple[Any, ...]:
    return (refs.run_partitions, refs.run_lengths, refs.offsets, refs.enqueued_at_ms, refs.extras,
            refs.partitions(), refs.message_ids(), list(refs.runs()))


@given(starts)
def test_start_refs(refs: list[Start]) -> None:
    filled = []
    for side in (compiled_start_refs, pure(compiled_start_refs)):
        out = pb.StartRefs()
        side.fill(out, refs)
        filled.append(out.SerializeToString())
    assert filled[0] == filled[1]
    parsed = pb.StartRefs.FromString(filled[0])
    got = both(lambda side: ref_columns(side.decode(parsed, b"")), compiled_start_refs)
    assert got[0] == got[1]


@settings(max_examples=300)
@given(starts, st.sampled_from(["partitions", "run_lengths", "offset_deltas", "enqueued_deltas"]), st.integers(0, 8),
       st.integers(-1, 1))
# Two Starts of one offset in a run (a zero delta past the run's first).
@example([Start(MessageId(0, n), b"", {}, 1, MessageId(0, n), 0) for n in (5, 9)], "offset_deltas", 1, 0)
def test_start_refs_malformed(refs: list[Start], column: str, at: int, value: int) -> None:
    # Well-formed references with one number changed, or one dropped (value 1 and past the end).
    filled = pb.StartRefs()
    compiled_start_refs.fill(filled, refs)
    numbers = list(getattr(filled, column))
    if at < len(numbers):
        numbers[at] = value if column == "partitions" else abs(value)  # the others are unsigned
    elif numbers and value == 1:
        numbers.pop()
    filled.ClearField(column)
    getattr(filled, column).extend(numbers)
    got = both(lambda side: ref_columns(side.decode(filled, b"")), compiled_start_refs)
    assert got[0] == got[1]


# --- kmq.client.consumer.intake --------------------------------------------------------------------------------


class FetchClient:
    """Hands out the scripted records: poll() one, consume() up to n of what is left of the current batch."""

    def __init__(self, batches: list[list[KafkaMessage]]) -> None:
        self.batches = [list(b) for b in batches]
        self.calls: list[tuple[Any, ...]] = []

    def poll(self, timeout: float) -> KafkaMessage | None:
        while self.batches and not self.batches[0]:
            self.batches.pop(0)
        return self.batches[0].pop(0) if self.batches else None

    def consume(self, num_messages: int, timeout: float) -> list[KafkaMessage]:
        batch = self.batches.pop(0) if self.batches else []
        self.batches.insert(0, batch[num_messages:])
        return batch[:num_messages]

    def pause(self, partitions: list[Any]) -> None:
        self.calls.append(("pause", list(partitions)))

    def resume(self, partitions: list[Any]) -> None:
        self.calls.append(("resume", list(partitions)))

    def assignment(self) -> list[Any]:
        return [0, 1]


def plain_record(partition: int, offset: int, own: bool, error: bool, topic: str = "m") -> KafkaMessage:
    return KafkaMessage(topic=topic, partition=partition, offset=offset, key=b"q" if own else b"other", value=b"v",
                        error=KafkaError(KafkaError._PARTITION_EOF) if error else None)


intake_records = st.builds(plain_record, st.integers(0, 2), st.integers(0, 100), st.booleans(),
                           st.sampled_from([False, False, False, True]), st.sampled_from(["m", "m", "m", "n"]))
intake_ops = st.lists(st.one_of(st.tuples(st.just("fetch")), st.tuples(st.just("take"), st.integers(0, 6)),
                                st.tuples(st.just("put_back")), st.tuples(st.just("forget"), st.integers(0, 2)),
                                st.tuples(st.just("update_pause"))), max_size=12)


@settings(max_examples=300)
@given(st.lists(st.lists(intake_records, max_size=6), max_size=5), intake_ops, st.integers(1, 4),
       st.integers(2, 12))
def test_intake(batches: list[list[KafkaMessage]], ops: list[tuple[Any, ...]], batch_records: int,
                hard_limit: int) -> None:
    seen = []
    for side in (compiled_intake, pure(compiled_intake)):
        client, errors, out = FetchClient(batches), [], []
        intake = side.Intake(client, b"q", errors.append, batch_records, hard_limit)
        last: list[KafkaMessage] = []
        for op in ops:
            if op[0] == "fetch":
                out.append(intake.fetch(0))
            elif op[0] == "take":
                last = intake.take(op[1])
                offsets, own = side.offsets_and_own(last, b"q")
                out.append(([(r.partition(), r.offset()) for r in last], offsets, [r.offset() for r in own]))
                # The comprehensions it replaces in the Start pipeline, as the reference:
                assert offsets == {(r.topic() or "", r.partition() or 0): (r.offset() or 0) + 1 for r in last}
                assert own == [r for r in last if r.key() == b"q"]
            elif op[0] == "put_back":
                intake.put_back(last)
                last = []
            elif op[0] == "forget":
                intake.forget([("m", op[1])])
            else:
                intake.update_pause()
            out.append((len(intake), intake.paused, intake.records_read))
        seen.append((out, [(r.partition(), r.offset()) for r in errors], client.calls))
    assert seen[0] == seen[1]


# --- kmq.client.consumer.settle_sink ---------------------------------------------------------------------------


class CountingEvent:
    def __init__(self) -> None:
        self.sets = 0

    def set(self) -> None:
        self.sets += 1


settle_ops = st.lists(st.one_of(
    st.tuples(st.just("ack"), st.integers(0, 20)),
    st.tuples(st.just("ack_many"), st.lists(st.integers(0, 20), max_size=4)),
    st.tuples(st.just("keep_alive"), st.integers(0, 20)), st.tuples(st.just("release"), st.integers(0, 20)),
    st.tuples(st.just("give_back"), st.integers(0, 20)), st.tuples(st.just("delay"), st.integers(0, 20)),
    st.tuples(st.just("end"), st.integers(0, 20)), st.tuples(st.just("take"))), max_size=20)


@settings(max_examples=300)
@given(settle_ops, st.integers(1, 5))
def test_settle_sink(ops: list[tuple[Any, ...]], batch_size: int) -> None:
    seen = []
    for side in (compiled_settle_sink, pure(compiled_settle_sink)):
        wake, out = CountingEvent(), []
        sink = side.SettleSink(batch_size, wake)
        for op in ops:
            mid = MessageId(0, op[1]) if len(op) > 1 and isinstance(op[1], int) else None
            if op[0] == "ack":
                sink.ack(mid)
            elif op[0] == "ack_many":
                sink.ack_many([MessageId(0, o) for o in op[1]])
            elif op[0] == "keep_alive":
                sink.keep_alive(mid)
            elif op[0] == "release":
                sink.release(mid, 5)
            elif op[0] == "give_back":
                sink.give_back(mid)
            elif op[0] == "delay":
                sink.delay(mid, 7)
            elif op[0] == "end":
                sink.end(mid, EndReason.REJECTED, "no")
            else:
                out.append(sink.take())
            out.append((bool(sink), wake.sets))
        seen.append(out)
    assert seen[0] == seen[1]


# --- kmq.client.consumer.late_acks -----------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.lists(st.one_of(st.tuples(st.just("one"), st.integers(0, 10)),
                          st.tuples(st.just("many"), st.lists(st.integers(0, 10), max_size=4)),
                          st.tuples(st.just("clock"), st.integers(0, 10) | st.none()),
                          st.tuples(st.just("wait"), st.floats(0, 0.2))), max_size=15))
def test_late_acks(ops: list[tuple[Any, Any]]) -> None:
    seen = []
    for side in (compiled_late_acks, pure(compiled_late_acks)):
        clock: list[Any] = [50, 0.0]
        late = side.LateAcks("q", lambda clock=clock: clock[0], lambda clock=clock: clock[1])
        counts = []
        for op, arg in ops:
            if op == "one":
                late.check_one(arg)
            elif op == "many":
                late.check(arg)
            elif op == "clock":
                clock[0] = arg
            else:
                clock[1] += arg
            counts.append(late.count)
        seen.append(counts)
    assert seen[0] == seen[1]


# --- kmq.client.consumer.hand_out ------------------------------------------------------------------------------


@given(st.lists(st.one_of(st.tuples(st.just("put"), st.integers(0, 4)), st.tuples(st.just("take"), st.integers(0, 4)),
                          st.tuples(st.just("take_one"), st.none()), st.tuples(st.just("limit"), st.integers(1, 8)),
                          st.tuples(st.just("room"), st.integers(0, 8)), st.tuples(st.just("close"), st.none())),
                max_size=15), st.integers(1, 8), st.integers(1, 8))
def test_hand_out(ops: list[tuple[str, Any]], capacity: int, max_in_flight: int) -> None:
    seen = []
    for side in (compiled_hand_out, pure(compiled_hand_out)):
        out, log, woken, counter = side.HandOut(capacity, max_in_flight), [], [], [0]
        out.add_listener(woken.append)
        for op, arg in ops:
            if op == "put":
                out.put([compiled_message.Message(b"", {}, "q", MessageId(0, counter[0] + i), 1,
                                                  MessageId(0, counter[0] + i), 0, Settles()) for i in range(arg)])
                counter[0] += arg
            elif op == "take":
                log.append([m.message_id for m in out.take(arg)])
            elif op == "take_one":
                got = out.take_one()
                log.append(None if got is None else got.message_id)
            elif op == "limit":
                out.limit = arg
            elif op == "room":
                log.append((out.room(arg, arg), out.usable_room(arg, arg)))
            else:
                log.append([m.message_id for m in out.close()])
            log.append((len(out), bool(out), out.limit, out.closed))
        seen.append((log, woken))
    assert seen[0] == seen[1]


# --- kmq.client.consumer.in_flight -----------------------------------------------------------------------------


class Mono:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


in_flight_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 4)),
    # Times on a coarse grid (ms): a Start or keep-alive appended exactly at a known deadline is drawn often.
    st.tuples(st.just("durable"), st.lists(st.integers(0, 12), max_size=4), st.integers(0, 12).map(lambda n: n * 1000)),
    st.tuples(st.just("hand_out_one"), st.integers(0, 12)),
    st.tuples(st.just("hand_out"), st.lists(st.integers(0, 12), max_size=4)),
    st.tuples(st.just("ack"), st.integers(0, 12)),
    st.tuples(st.just("ack_many"), st.lists(st.integers(0, 12), max_size=4)),
    st.tuples(st.just("release"), st.integers(0, 12), st.integers(0, 5000)),
    st.tuples(st.just("give_back"), st.integers(0, 12)),
    st.tuples(st.just("keep_alive"), st.integers(0, 12)),
    st.tuples(st.just("discard"), st.integers(0, 12)),
    st.tuples(st.just("clock"), st.integers(0, 24).map(lambda n: n * 500)),
), max_size=20)


def run_in_flight(side: ModuleType, ops: list[tuple[Any, ...]], grouped: frozenset[int]) -> Any:
    config = Config(bootstrap_servers="x", redelivery_timeout_ms=6000)
    producer = FakeProducer()
    writer = MarkerWriter(config, config.marker_topic, b"q", producer)
    # Its thread stopped: the settles are written once, at the end. Drained at the thread's own pace, they were cut
    # into records where the timing fell, and a keep-alive could share a take with its message's ack or not.
    writer.settles.close(0)
    mono = Mono()
    writer.channel.broker_time = BrokerTime(mono)
    settled: list[int] = []
    table = side.InFlightMessages(config, config.default_topics, "q", writer, producer, lambda: settled.append(1))
    table.on_settled_many = settled.append
    group_settles: list[Any] = []
    table.on_group_settle = lambda m, kind, delay, end: group_settles.append((m.message_id, kind, delay, end))
    messages: list[Any] = []
    log: list[Any] = []

    def msg(i: int) -> Any:
        return messages[i % len(messages)] if messages else None

    for op in ops:
        # The table reuses a broker-clock reading for a few ms of real time: each step reads it afresh here.
        table._clear_until = 0.0
        table.late_acks._now_until = float("-inf")
        try:
            if op[0] == "add":
                new = [compiled_message.Message(b"p", {wire.HEADER_GROUP: b"g"} if len(messages) + i in grouped else {},
                                                "q", MessageId(0, len(messages) + i), 1,
                                                MessageId(0, len(messages) + i), 0, table)
                       for i in range(op[1])]
                messages += new
                table.add_many(new)
            elif op[0] == "clock":
                mono.now += 0.5
                writer.broker_time.observe(mono.now, 1_000_000 + op[1])
            elif not messages:
                continue
            elif op[0] == "durable":
                table.durable([msg(i).message_id for i in op[1]], 1_000_000 + op[2])
            elif op[0] == "hand_out_one":
                log.append(table.hand_out_one(msg(op[1])))
            elif op[0] == "hand_out":
                log.append([m.message_id for m in table.hand_out([msg(i) for i in op[1]])])
            elif op[0] == "ack":
                msg(op[1]).ack()
            elif op[0] == "ack_many":
                table._ack_many([msg(i) for i in op[1]])
            elif op[0] == "release":
                msg(op[1]).release(op[2] / 1000)
            elif op[0] == "give_back":
                msg(op[1]).give_back()
            elif op[0] == "keep_alive":
                msg(op[1]).keep_alive()
            else:
                table.discard(msg(op[1]).message_id)
        except KmqError as err:
            log.append((type(err).__name__, str(err)))
        log.append((len(table), sorted(table), table.given_back_late, table.late_acks.count))
    writer.flush(0)
    markers = [list(compiled_marker_batch.decode_record(r.value)) for r in producer.records]
    unsettled = [m.message_id for m in table.close()]
    # _next_keep_alive is read from the real monotonic clock: only whether it was reset to 0 compares.
    states = [(m.message_id, m._settled_as, m._deadline_ms, m._next_keep_alive == 0.0) for m in messages]
    return log, states, markers, settled, group_settles, unsettled


@settings(max_examples=300)
@given(in_flight_ops, st.frozensets(st.integers(0, 12), max_size=3))
# A keep-alive appended exactly at the deadline it was meant to move proves nothing (and one just before does).
@example([("add", 1), ("durable", [0], 0), ("durable", [0], 6000)], frozenset())
@example([("add", 1), ("durable", [0], 0), ("durable", [0], 5000)], frozenset())
def test_in_flight(ops: list[tuple[Any, ...]], grouped: frozenset[int]) -> None:
    assert run_in_flight(compiled_in_flight, ops, grouped) == run_in_flight(pure(compiled_in_flight), ops, grouped)


# --- the worker's per-job path: kmq.worker.metrics, prefetch, settle, handler_runs ------------------------------


@given(st.lists(st.one_of(st.floats(allow_nan=True), st.sampled_from(compiled_metrics.DURATION_BUCKETS)), max_size=30))
def test_histogram(values: list[float]) -> None:
    seen = []
    for side in (compiled_metrics, pure(compiled_metrics)):
        histogram = side.Histogram(side.DURATION_BUCKETS)
        for value in values:
            histogram.observe(value)
        seen.append((histogram.counts, repr(histogram.total)))
    reference = [0] * (len(compiled_metrics.DURATION_BUCKETS) + 1)
    for value in values:
        reference[bisect.bisect_left(compiled_metrics.DURATION_BUCKETS, value)] += 1  # what it replaces
    assert seen[0] == seen[1] and seen[0][0] == reference


@given(st.lists(st.tuples(st.sampled_from(["observe", "at_least", "thread_batch", "size_for"]),
                          st.floats(0, 2) | st.sampled_from([0.0, 1e-7, 3e-5, 0.002])), max_size=20),
       st.integers(1, 4), st.integers(1, 2000))
def test_prefetch_window(ops: list[tuple[str, float]], concurrency: int, maximum: int) -> None:
    seen = []
    for side in (compiled_prefetch, pure(compiled_prefetch)):
        sizes: list[int] = []
        window = side.PrefetchWindow(concurrency, maximum, sizes.append)
        log: list[Any] = []
        for op, value in ops:
            if op == "observe":
                window.observe(value)
            elif op == "at_least":
                window.at_least(value)
            elif op == "thread_batch":
                log.append(window.thread_batch())
            else:
                log.append(window.size_for(value))
            log.append((window.size, window.mean_s))
        seen.append((log, sizes))
    assert seen[0] == seen[1]


def _worker_message(i: int, settles: Settles, settled_as: str = "") -> Any:
    return compiled_message.Message(b"%d" % i, {}, "q", MessageId(0, i), 1 + i % 3, MessageId(0, i), 0, settles,
                                    settled_as)


outcomes = st.sampled_from(["returned", "rejected", "failed", "timed_out", "settled", "child ack", "child release",
                            "child reject", "child give_back"])


@given(st.lists(st.tuples(outcomes, st.booleans()), max_size=12), st.integers(0, 3), st.booleans())
def test_settle_policy(runs: list[tuple[str, bool]], max_deliveries: int, at_most_once: bool) -> None:
    from kmq.worker.handler_runner import RETURNED, Outcome

    config = Config(bootstrap_servers="x:1", max_deliveries=max_deliveries,
                    at_most_once_queues=["q"] if at_most_once else [])
    seen = []
    for side in (compiled_settle, pure(compiled_settle)):
        settles, counts = Settles(), collections.Counter[str]()
        policy = side.SettlePolicy(config, side.Backoff(), compiled_metrics.WorkerMetrics(["q"]), counts, False)
        random.seed(7)  # the backoff's jitter
        for i, (kind, limited) in enumerate(runs):
            message = _worker_message(i, settles, "ack" if kind == "settled" else "")
            if kind == "returned":
                outcome = RETURNED
            elif kind.startswith("child "):
                how = kind.removeprefix("child ")
                outcome = Outcome("returned", settled=(how, {"release": 1.5, "reject": "no"}.get(how)))
            elif kind == "settled":
                outcome = Outcome("returned")
            else:
                outcome = Outcome(kind, f"{kind} detail")  # type: ignore[arg-type]
            policy.settle(message, outcome, 2.0 if limited else None)
            if i % 4 == 3:
                policy.give_back(_worker_message(100 + i, settles))
        seen.append((settles.calls, dict(counts)))
    assert seen[0] == seen[1]


class _Ready:
    """A Consumer's receive, receive_many and on_ready over a list of messages; ``drained()`` once none is left."""

    def __init__(self, messages: list[Any], drained: Callable[[], None]) -> None:
        self.messages = messages
        self.drained = drained

    def receive(self, timeout: float | None = None) -> Any:
        got = self.receive_many(1, timeout)
        return got[0] if got else None

    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[Any]:
        got, self.messages = self.messages[:max_messages], self.messages[max_messages:]
        if not got:
            self.drained()
        return got

    def on_ready(self, listener: Any) -> None:
        pass


def _job(message: Any) -> None:
    """Returns, rejects or fails by the message's payload."""
    from kmq.errors import Reject

    kind = int(message.payload) % 3
    if kind == 1:
        raise Reject("no")
    if kind == 2:
        raise ValueError("boom")


@given(st.integers(0, 40), st.sampled_from([0.0, 1e-6, 0.01]), st.integers(0, 40))
def test_handler_runs(jobs: int, mean_s: float, stop_after: int) -> None:
    from kmq.worker.dispatch import Dispatcher
    from kmq.worker.handler_runner import ThreadRunner
    from kmq.worker.time_limit import TimeLimits

    config = Config(bootstrap_servers="x:1")
    seen = []
    for side in (compiled_handler_runs, pure(compiled_handler_runs)):
        settles, counts = Settles(), collections.Counter[str]()
        metrics = compiled_metrics.WorkerMetrics(["q"])
        policy = compiled_settle.SettlePolicy(config, compiled_settle.Backoff(), metrics, counts, False)
        window = compiled_prefetch.PrefetchWindow(1, 1000, lambda _size: None)
        if mean_s:
            window.observe(mean_s)  # a known mean: a lone thread takes batches of that many
        stop: list[Callable[[], None]] = []
        ready = _Ready([_worker_message(i, settles) for i in range(jobs)], lambda stop=stop: stop[0]())
        dispatcher = Dispatcher([ready])  # type: ignore[list-item]
        stop.append(dispatcher.stop)  # every job taken: the next ask for messages gets none
        done = [0]

        def stopping(done: list[int] = done) -> bool:
            done[0] += 1
            return done[0] > stop_after

        runs = side.HandlerRuns(config, _job, None, policy, {"q": window}, dispatcher, dispatcher.stop, stopping)
        limits = TimeLimits(runs.time_limit_expired)
        slot = compiled_metrics.ThreadSlot("t", ["q"])
        random.seed(7)
        try:
            runs.serve(slot, ThreadRunner(_job, limits))
        finally:
            limits.close()
        tally = slot.tallies["q"]
        seen.append((settles.calls, dict(counts), sum(tally.durations.counts), sum(tally.waits.counts), slot.queue))
    assert seen[0] == seen[1]
