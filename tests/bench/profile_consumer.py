"""Profiles the consumer's hot path: ``python -m tests.bench.profile_consumer MODE [N]`` against
``KMQ_BOOTSTRAP_SERVERS`` (a tracker runs beside it). MODE: ``one`` (receive() + ack()), ``many`` (receive_many(500)
+ ack_many()), ``many-ack`` (receive_many(500) + ack()), ``go`` (receive() + ack() in the kafka-mq-go format),
``worker`` (a Worker with 1 thread and a handler that returns at once, as the worker bench's 1-thread row),
``share`` (the baseline: Kafka's ShareConsumer, explicit ACCEPT per record and one ``commit_sync`` per poll, as
the bench's).

Run it under py-spy for every thread's share of the GIL (``py-spy record --gil --format raw -o out.txt -- python -m
tests.bench.profile_consumer one``), then ``python -m tests.bench.profile_consumer top out.txt`` for the
functions by self and total samples. Prints msgs/s from the first message to the last, CPU µs per message, and each
thread's own CPU µs per message (from ``/proc/self/task``): when two Python threads contend for the GIL, py-spy
gives the one that waits some of the other's time, and only each thread's own CPU splits the cost truly. Then the
machine's: every process's CPU µs per message over the same window (the broker, this process, the tracker), and how
busy the machine was; it tells a process bound by its one GIL (near 100% of a core, the machine not full) from a
machine out of cores.
``PROFILE_CONSUMER_KAFKA="fetch.queue.backoff.ms=1000"``: librdkafka settings for the consumer (``consumer_kafka``);
``PROFILE_CONSUMER_CONFIG="start_pipeline_depth=6,max_in_flight=4000"``: integer fields of its kmq Config.
``PROFILE_CONSUMER_SWITCH_S=0.0005``: the interpreter's switch interval (how long a thread waiting for the GIL waits
before it asks the holder to drop it; 5 ms by default). The consumer tunes the collector once set up
(``kmq.tune_gc``), as the performance guide says; ``PROFILE_CONSUMER_GC=default`` leaves CPython's settings, for the
difference.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

from kmq import Config, Service, logs, tune_gc
from tests.bench import workloads as w


def _cpu_s(stat_fields: list[str], tick: int) -> float:
    """CPU seconds (user + system) from a ``/proc/.../stat`` line's fields after the command's closing parenthesis."""
    return (int(stat_fields[11]) + int(stat_fields[12])) / tick


class ThreadCpu:
    """Each thread's CPU seconds (user + system) between ``begin`` and ``end``, by thread name (Linux)."""

    def __init__(self) -> None:
        self._first: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    @staticmethod
    def _now() -> dict[str, float]:
        tick = os.sysconf("SC_CLK_TCK")
        python_names = {t.native_id: t.name for t in threading.enumerate()}  # (3.11 does not name OS threads)
        seconds: dict[str, float] = collections.defaultdict(float)
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as f:
                    name = python_names.get(int(task)) or f.read().strip()
                with open(f"/proc/self/task/{task}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:  # the thread ended meanwhile
                continue
            seconds[name] += _cpu_s(fields, tick)
        return seconds

    def begin(self) -> None:
        self._first = self._now()

    def end(self) -> None:
        self.spent = {name: s - self._first.get(name, 0.0) for name, s in self._now().items()}

    def report(self, n: int) -> str:
        rows = sorted(self.spent.items(), key=lambda kv: -kv[1])
        return "\n".join(f"  {1e6 * s / n:6.2f} µs  {name}" for name, s in rows if s > 0)


class MachineCpu:
    """Every process's CPU seconds between ``begin`` and ``end`` (Linux ``/proc``), by role, and the machine's."""

    def __init__(self) -> None:
        self._first: tuple[dict[int, tuple[float, str]], float, float] = ({}, 0.0, 0.0)
        self._last = self._first

    @staticmethod
    def _now() -> tuple[dict[int, tuple[float, str]], float, float]:
        tick = os.sysconf("SC_CLK_TCK")
        processes: dict[int, tuple[float, str]] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
                with open(f"/proc/{pid}/cmdline") as f:
                    command = f.read().replace("\0", " ")
            except OSError:  # the process ended meanwhile
                continue
            processes[int(pid)] = (_cpu_s(fields, tick), command)
        with open("/proc/stat") as f:
            jiffies = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(jiffies) - jiffies[3] - jiffies[4]) / tick  # all but idle and iowait
        return processes, busy, time.monotonic()

    def begin(self) -> None:
        self._first = self._now()

    def end(self) -> None:
        self._last = self._now()

    @staticmethod
    def _role(pid: int, command: str) -> str:
        if "java" in command and "kafka" in command:
            return "broker"
        if pid == os.getpid():
            return "this process"
        if "kmq.redelivery" in command:
            return "tracker"
        return "others"

    def report(self, n: int) -> str:
        (first, busy_first, at_first), (last, busy_last, at_last) = self._first, self._last
        window = max(at_last - at_first, 1e-9)
        spent: collections.Counter[str] = collections.Counter()
        for pid, (seconds, command) in last.items():
            if pid in first and seconds > first[pid][0]:
                spent[self._role(pid, command)] += seconds - first[pid][0]
        busy = busy_last - busy_first
        rows = [f"  {1e6 * s / n:6.2f} µs  {100 * s / window:5.1f}% of a core  {role}"
                for role, s in spent.most_common()]
        return "\n".join([f"the machine's CPU per message: {1e6 * busy / n:.2f} µs, busy {100 * busy / window:.0f}% "
                          f"of {100 * (os.cpu_count() or 1)}%", *rows])


CPU = ThreadCpu()
MACHINE = MachineCpu()


def _pairs(variable: str) -> dict[str, str]:
    """``a=1,b=2`` in the environment variable, as a dict."""
    return dict(kv.split("=", 1) for kv in os.environ.get(variable, "").split(",") if kv)


def consume(mode: str, n: int) -> tuple[float, float]:
    """msgs/s from the first message to the last, and the process's CPU µs per message meanwhile (less noisy on a
    shared machine than the rate)."""
    logs.configure("error")
    if os.environ.get("PROFILE_CONSUMER_SWITCH_S"):
        sys.setswitchinterval(float(os.environ["PROFILE_CONSUMER_SWITCH_S"]))
    if mode == "share":
        return _share(n)
    base = w.group("prof")
    config = Config(bootstrap_servers=os.environ["KMQ_BOOTSTRAP_SERVERS"], message_topic=f"{base}.m",
                    marker_topic=f"{base}.mk", marker_format="kafka-mq-go" if mode == "go" else "kmq",
                    consumer_kafka=_pairs("PROFILE_CONSUMER_KAFKA"),
                    **{name: int(value) for name, value in _pairs("PROFILE_CONSUMER_CONFIG").items()})
    with w.backlog_with_tracker(config, "q", n) as queue:
        if mode == "worker":
            return _worker(config, queue, n)
        consumer = Service(config).queue(queue).consumer()
        if os.environ.get("PROFILE_CONSUMER_GC") != "default":
            tune_gc()
        done, first = 0, None
        while done < n:
            if mode in ("one", "go"):
                msg = consumer.receive(0.2)
                if msg is None:
                    continue
                msg.ack()
                got = 1
            else:
                batch = consumer.receive_many(500, 0.2)
                if not batch:
                    continue
                if mode == "many":
                    consumer.ack_many(batch)
                else:
                    for msg in batch:
                        msg.ack()
                got = len(batch)
            if first is None:
                first = _begin()
            done += got
        assert consumer.flush(30) == 0
        measured = _end(n, first or (0.0, 0.0))
        consumer.close()
        return measured


def _begin() -> tuple[float, float]:
    """Opens the measured window at the first message: the wall clock and the process's CPU clock, and every
    thread's and process's CPU."""
    CPU.begin()
    MACHINE.begin()
    return time.perf_counter(), time.process_time()


def _end(n: int, first: tuple[float, float]) -> tuple[float, float]:
    """Closes the window ``_begin`` opened: msgs/s over it and the process's CPU µs per message."""
    CPU.end()
    MACHINE.end()
    return n / (time.perf_counter() - first[0]), (time.process_time() - first[1]) / n * 1e6


def _worker(config: Config, queue: str, n: int) -> tuple[float, float]:
    from kmq.worker import Worker

    worker = Worker(config, [queue], lambda _message: None)
    runner = threading.Thread(target=worker.run, kwargs={"install_signals": False, "on_started": tune_gc},
                              name="the worker", daemon=True)
    runner.start()
    while not worker.counts["acked"]:
        time.sleep(0.0005)
    done_first, first = worker.counts["acked"], _begin()
    while worker.counts["acked"] < n:
        time.sleep(0.002)
    measured = _end(n - done_first, first)
    worker.stop()
    runner.join(30)
    return measured


def _share(n: int) -> tuple[float, float]:
    """The bench's baseline, in this process: a ShareConsumer reading ``n`` records of 256 B (6 partitions)."""
    from confluent_kafka import AcknowledgeType
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = os.environ["KMQ_BOOTSTRAP_SERVERS"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = w.group("prof-share")
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    group = w.share_group_from_earliest(admin)
    w.raw_produce(bootstrap, topic, n, 256)
    consumer = w.share_consumer(bootstrap, topic, group)
    done, first = 0, None
    while done < n:
        good = [m for m in consumer.poll(0.2) or [] if m.error() is None]
        if not good:
            continue
        if first is None:
            first = _begin()
        for msg in good:
            consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        done += len(good)
    measured = _end(n, first or (0.0, 0.0))
    consumer.close()
    return measured


def top(path: str, lines: int = 25) -> None:
    """Self and total samples per function from py-spy's raw (collapsed) output."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    with open(path) as f:
        for line in f:
            stack, _, count_text = line.rstrip().rpartition(" ")
            count = int(count_text)
            if "kmq_send" in stack or "create_topics" in stack or "_find_and_load" in stack:  # set-up, imports
                continue
            frames = [fr.split(" (")[0] + " (" + fr.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                      for fr in stack.split(";")[1:]]  # the first is the thread
            samples += count
            if frames:
                own[frames[-1]] += count
            for frame in set(frames):
                total[frame] += count
    print(f"{samples} samples (GIL held)\n  self%  total%  function")
    for name, count in own.most_common(lines):
        print(f"{100 * count / samples:6.1f} {100 * total[name] / samples:6.1f}  {name}")
    print("\nby total:")
    for name, count in total.most_common(lines):
        print(f"{100 * own[name] / samples:6.1f} {100 * count / samples:6.1f}  {name}")


if __name__ == "__main__":
    if sys.argv[1] == "top":
        top(sys.argv[2])
    else:
        rate, cpu_us = consume(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100_000)
        n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
        print(f"{sys.argv[1]}: {rate:,.0f} msgs/s, {cpu_us:.2f} CPU µs per message (all threads)\n"
              f"each thread's CPU per message (user + system):\n{CPU.report(n)}\n{MACHINE.report(n)}")
