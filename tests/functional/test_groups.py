"""Message groups on a real broker, through the library: order and one at a time per group, in-place redelivery
(release, release with a delay, give-back, a closed consumer), and a new owner that takes over what an earlier one
held. The oracle is the handlers' own log: per group, when each message started and ended."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from kmq import Service
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import PayloadError
from tests.helpers import ConfigFactory, run_kmq

pytestmark = pytest.mark.timeout(120)


class GroupLog:
    """The handlers' log: per group, (payload, start, end) of each run; checks order and one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: dict[str, list[tuple[int, float, float]]] = defaultdict(list)

    def run(self, message: Message, work_s: float) -> None:
        start = time.monotonic()
        time.sleep(work_s)
        with self._lock:
            self.runs[message.group or ""].append((int(message.payload), start, time.monotonic()))

    def check(self, sent: dict[str, list[int]]) -> None:
        for group, numbers in sent.items():
            runs = sorted(self.runs[group], key=lambda r: r[1])
            done = [n for n, _, _ in runs]
            assert sorted(set(done)) == numbers, f"group {group}: lost {set(numbers) - set(done)}"
            firsts = list(dict.fromkeys(done))
            assert firsts == numbers, f"group {group} ran out of order: {done}"
            for (_, _, end), (_, start, _) in itertools.pairwise(runs):
                assert start >= end - 0.001, f"group {group}: two runs at once"


def _serve(consumer: object, handle: Callable[[Message], None], threads: int, log: GroupLog, runs: int,
           timeout_s: float = 60) -> None:
    """``threads`` threads receive from ``consumer`` and ``handle`` each message, until ``log`` has ``runs``."""
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            message = consumer.receive(0.1)  # type: ignore[attr-defined]
            if message is not None:
                handle(message)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + timeout_s
    while sum(len(r) for r in log.runs.values()) < runs and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for worker in workers:
        worker.join()


def _send(config: Config, queue: str, groups: int, per_group: int) -> dict[str, list[int]]:
    sent: dict[str, list[int]] = defaultdict(list)
    with Service(config).queue(queue).producer() as producer:
        for i in range(per_group):
            for g in range(groups):
                producer.send_async(b"%d" % i, group=f"account-{g}")
                sent[f"account-{g}"].append(i)
        assert producer.flush(30) == 0
    return sent


def test_interleaved_groups_run_in_order_and_one_at_a_time_with_eight_threads(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=3)
    sent = _send(config, "jobs", groups=2, per_group=20)
    log = GroupLog()
    with Service(config).queue("jobs").consumer() as consumer:
        def handle(message: Message) -> None:
            log.run(message, 0.02)
            message.ack()
        _serve(consumer, handle, 8, log, 40)
    log.check(sent)


def test_a_released_message_comes_back_before_the_later_ones_of_its_group(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2)
    sent = _send(config, "jobs", groups=3, per_group=6)
    log = GroupLog()
    counts: dict[tuple[str, int], list[int]] = defaultdict(list)
    with Service(config).queue("jobs").consumer() as consumer:
        def handle(message: Message) -> None:
            number = int(message.payload)
            counts[(message.group or "", number)].append(message.delivery_count)
            if number % 2 == 0 and message.delivery_count == 1:
                message.release(0.2 if number % 4 == 0 else 0)  # every even one fails once
                return
            log.run(message, 0.005)
            message.ack()
        _serve(consumer, handle, 4, log, 18)
    log.check(sent)
    assert all(c == [1, 2] for (_, n), c in counts.items() if n % 2 == 0), counts
    assert all(c == [1] for (_, n), c in counts.items() if n % 2), counts


def test_a_new_consumer_takes_over_in_place_what_a_closed_one_held(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=1)
    sent = _send(config, "jobs", groups=4, per_group=5)
    service = Service(config)
    first = service.queue("jobs").consumer()
    held = [m for m in (first.receive(10) for _ in range(4)) if m is not None]
    assert sorted(m.group or "" for m in held) == [f"account-{g}" for g in range(4)]
    assert all(m.payload == b"0" for m in held), "one per group, each its first"
    first.close()  # releases what it held, in place
    log = GroupLog()
    with service.queue("jobs").consumer() as second:
        def handle(message: Message) -> None:
            log.run(message, 0.001)
            message.ack()
        _serve(second, handle, 4, log, 20)
    log.check(sent)


def test_a_grouped_send_with_the_kafka_mq_go_format_is_refused(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=1, marker_format="kafka-mq-go")
    with Service(config).queue("jobs").producer() as producer, pytest.raises(PayloadError, match="marker_format"):
        producer.send(b"x", group="a")
    with Service(config).queue("jobs").producer() as producer, pytest.raises(PayloadError, match="group"):
        producer.send(b"x", group="")


def test_kmq_send_group_stats_groups_and_inspect_show_each_group(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2)
    for group, count in (("busy", "5"), ("quiet", "1")):
        result = run_kmq(config, "send", "jobs", "job {i}", "--count", count, "--group", group, "--ids")
        assert result.returncode == 0, result.stderr
    with Service(config).queue("jobs").consumer() as consumer:
        held = [m for m in (consumer.receive(10) for _ in range(2)) if m is not None]
        assert sorted(m.group or "" for m in held) == ["busy", "quiet"], "one per group"
        next(m for m in held if m.group == "quiet").ack()
        assert consumer.flush(10) == 0
        busy = next(m for m in held if m.group == "busy")
        result = run_kmq(config, "stats", "--groups", "--json", "--queue", "jobs")
        assert result.returncode == 0, result.stderr
        rows = {r["group"]: r for r in json.loads(result.stdout)}
        assert (rows["busy"]["waiting"], rows["busy"]["in_flight"]) == (4, 1)
        assert (rows["quiet"]["waiting"], rows["quiet"]["in_flight"], rows["quiet"]["acked"]) == (0, 0, 1)
        assert list(rows) == ["busy", "quiet"], "the largest backlog first"
        shown = run_kmq(config, "inspect", "jobs", str(busy.message_id))
        assert shown.returncode == 0, shown.stderr
        assert "group 'busy'" in shown.stdout and "state: in_flight" in shown.stdout, shown.stdout
        busy.ack()


def test_a_redriven_dead_letter_goes_back_to_its_group_s_partition(kmq_config: ConfigFactory) -> None:
    from kmq.ops.dlq import redrive

    config = kmq_config(partitions=6)
    with Service(config).queue("jobs").producer() as producer:
        sent = producer.send(b"0", group="account-7")
    with Service(config).queue("jobs").consumer() as consumer:
        message = consumer.receive(30)
        assert message is not None and message.group == "account-7"
        message.reject("bad")
        assert consumer.flush(10) == 0
        assert redrive(config, "jobs") == 1
        again = consumer.receive(30)
        assert again is not None and again.group == "account-7"
        assert again.message_id.partition == sent.partition, "the group's partition: its owner keeps its order"
        again.ack()


def test_a_duplicate_grouped_send_is_ended_before_its_group_sees_it_and_the_group_keeps_its_order(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(partitions=3)
    with Service(config).queue("jobs").producer() as producer:
        for n, dedup_id in enumerate(["o-1", "o-2", "o-1", "o-3"]):  # the third repeats the first
            producer.send(b"%d" % n, group="account-7", dedup_id=dedup_id)
    got = []
    with Service(config).queue("jobs").consumer() as consumer:
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            message = consumer.receive(0.5)
            if message is not None:
                got.append(message.payload)
                message.ack()
        assert consumer.receive(1.0) is None, "the duplicate is never handed out"
        assert consumer.deduplicated == 1
    assert got == [b"0", b"1", b"3"]


def test_group_concurrency_two_runs_two_of_a_group_at_once_never_three(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2, group_concurrency={"jobs": 2})
    sent = _send(config, "jobs", groups=2, per_group=10)
    log, running, most = GroupLog(), defaultdict(int), defaultdict(int)
    lock = threading.Lock()
    with Service(config).queue("jobs").consumer() as consumer:
        def handle(message: Message) -> None:
            group = message.group or ""
            with lock:
                running[group] += 1
                most[group] = max(most[group], running[group])
            log.run(message, 0.05)
            with lock:
                running[group] -= 1
            message.ack()
        _serve(consumer, handle, 8, log, 20)
    assert {g: sorted({n for n, _, _ in runs}) for g, runs in log.runs.items()} == sent, "nothing lost"
    assert dict(most) == {g: 2 for g in sent}, f"at most two of a group at once, and two did run at once: {most}"


def test_a_group_waiting_out_a_delayed_release_holds_back_neither_other_groups_nor_ungrouped_messages(
    kmq_config: ConfigFactory,
) -> None:
    # One partition: every message has the same owner, the case where a blocked group could hold the others back.
    config = kmq_config(partitions=1)
    with Service(config).queue("jobs").producer() as producer:
        for n in range(3):
            producer.send_async(b"%d" % n, group="slow")
            for _ in range(2):
                producer.send_async(b"%d" % n, group="fast")
                producer.send_async(b"%d" % n)
        assert producer.flush(30) == 0
    log, released_at, delay_s = GroupLog(), [0.0], 3.0
    with Service(config).queue("jobs").consumer() as consumer:
        def handle(message: Message) -> None:
            if message.group == "slow" and message.payload == b"0" and message.delivery_count == 1:
                released_at[0] = time.monotonic()
                message.release(delay_s)  # its group waits the delay out at its head
                return
            log.run(message, 0.005)
            message.ack()
        _serve(consumer, handle, 4, log, 15, timeout_s=60)
    assert released_at[0], "the slow group's head was never handed out"
    slow_first = min(start for _, start, _ in log.runs["slow"])
    assert slow_first >= released_at[0] + delay_s - 0.1, "the slow group's head came back only after its delay"
    others = [end for group in ("fast", "") for _, _, end in log.runs[group]]
    assert len(others) == 12 and max(others) < released_at[0] + delay_s, \
        "the other group and the ungrouped messages all ran while the slow group waited"
    assert [n for n, _, _ in sorted(log.runs["slow"], key=lambda r: r[1])] == [0, 1, 2], "then in order"
