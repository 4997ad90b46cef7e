"""Profiles the consumer's hot path: ``python -m tests.bench.profile_consumer MODE [N]`` against
``KMQ_BOOTSTRAP_SERVERS`` (a tracker runs beside it). MODE: ``one`` (receive() + ack()), ``many`` (receive_many(500)
+ ack_many()), ``many-ack`` (receive_many(500) + ack()), ``go`` (receive() + ack() in the kafka-mq-go format),
``worker`` (a Worker with 1 thread and a handler that returns at once, as the worker bench's 1-thread row).

Run it under py-spy for every thread's share of the GIL (``py-spy record --gil --format raw -o out.txt -- python -m
tests.bench.profile_consumer one``), then ``python -m tests.bench.profile_consumer top out.txt`` for the
functions by self and total samples. Prints msgs/s from the first message to the last, CPU µs per message, and each
thread's own CPU µs per message (from ``/proc/self/task``): when two Python threads contend for the GIL, py-spy
gives the one that waits some of the other's time, and only each thread's own CPU splits the cost truly.
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
            seconds[name] += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        return seconds

    def begin(self) -> None:
        self._first = self._now()

    def end(self) -> None:
        self.spent = {name: s - self._first.get(name, 0.0) for name, s in self._now().items()}

    def report(self, n: int) -> str:
        rows = sorted(self.spent.items(), key=lambda kv: -kv[1])
        return "\n".join(f"  {1e6 * s / n:6.2f} µs  {name}" for name, s in rows if s > 0)


CPU = ThreadCpu()


def _pairs(variable: str) -> dict[str, str]:
    """``a=1,b=2`` in the environment variable, as a dict."""
    return dict(kv.split("=", 1) for kv in os.environ.get(variable, "").split(",") if kv)


def consume(mode: str, n: int) -> tuple[float, float]:
    """msgs/s from the first message to the last, and the process's CPU µs per message meanwhile (less noisy on a
    shared machine than the rate)."""
    logs.configure("error")
    if os.environ.get("PROFILE_CONSUMER_SWITCH_S"):
        sys.setswitchinterval(float(os.environ["PROFILE_CONSUMER_SWITCH_S"]))
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
        done, first, cpu_first = 0, None, 0.0
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
                first, cpu_first = time.perf_counter(), time.process_time()
                CPU.begin()
            done += got
        assert consumer.flush(30) == 0
        CPU.end()
        rate = n / (time.perf_counter() - (first or 0))
        cpu_us = (time.process_time() - cpu_first) / n * 1e6
        consumer.close()
        return rate, cpu_us


def _worker(config: Config, queue: str, n: int) -> tuple[float, float]:
    from kmq.worker import Worker

    worker = Worker(config, [queue], lambda _message: None)
    runner = threading.Thread(target=worker.run, kwargs={"install_signals": False, "on_started": tune_gc},
                              name="the worker", daemon=True)
    runner.start()
    while not worker.counts["acked"]:
        time.sleep(0.0005)
    first, cpu_first, done_first = time.perf_counter(), time.process_time(), worker.counts["acked"]
    CPU.begin()
    while worker.counts["acked"] < n:
        time.sleep(0.002)
    CPU.end()
    rate = (n - done_first) / (time.perf_counter() - first)
    cpu_us = (time.process_time() - cpu_first) / (n - done_first) * 1e6
    worker.stop()
    runner.join(30)
    return rate, cpu_us


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
              f"each thread's CPU per message (user + system):\n{CPU.report(n)}")
