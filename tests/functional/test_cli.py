"""The kmq command line, driven as subprocesses against the real broker."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kmq import Config, Service
from kmq.config import DEFAULT_MAX_DELIVERIES
from tests.helpers import ROOT, ConfigFactory, env_for, receive_n, run_kmq, tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(150)


kmq = run_kmq


_started: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _kill_leftover_workers() -> Iterator[None]:
    """A failed test must not leave its worker running into the next one."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def start_worker(config: Config, handler: str, queue: str, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "kmq.cli", "worker", handler, "--queue", queue,
                             "--backoff-base", "0.2", "--backoff-max", "0.5", *extra], cwd=ROOT,
                            env=env_for(config), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _started.append(proc)
    return proc


def stop(proc: subprocess.Popen[str]) -> dict[str, int]:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_topics_create_then_check(kafka_bootstrap: str) -> None:
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"cli-{time.time_ns()}.m",
                    marker_topic=f"cli-{time.time_ns()}.mk")
    created = kmq(config, "topics", "create", "--partitions", "2", "--marker-partitions", "1")
    assert created.returncode == 0, created.stderr
    assert created.stdout.count("created") == 4  # messages, markers, dead letters, control
    checked = kmq(config, "topics", "check")
    assert checked.returncode == 0 and checked.stdout.count(": ok") == 3


def test_send_then_a_worker_processes_everything(kmq_config: ConfigFactory) -> None:
    config = kmq_config()
    assert kmq(config, "send", "cli", "one").returncode == 0
    assert kmq(config, "send", "cli", "--stdin", stdin="two\nthree\n").returncode == 0
    sent = kmq(config, "send", "cli", "load-{i}", "--count", "20")
    assert sent.returncode == 0 and "sent 20 messages to 'cli'" in sent.stdout
    worker = start_worker(config, "tests.handlers:record", "cli", "--concurrency", "3")
    assert wait_for(lambda: stats(config, "cli")["acked"] == 23, timeout_s=40)
    assert stop(worker) == {"acked": 23}


def test_a_handler_that_fails_twice_is_acked_on_delivery_3(kmq_config: ConfigFactory) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000, max_deliveries=5)
    with tracker_thread(config):
        assert kmq(config, "send", "flaky", "job").returncode == 0
        worker = start_worker(config, "tests.handlers:fail_twice", "flaky")
        assert wait_for(lambda: stats(config, "flaky")["acked"] == 1, timeout_s=40)
        counts = stop(worker)
    assert counts == {"released": 2, "acked": 1}
    assert stats(config, "flaky")["delivered"] == 3


def test_a_handler_that_always_fails_ends_on_the_dead_letter_topic_and_redrive_brings_it_back(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000, max_deliveries=2)
    with tracker_thread(config):
        assert kmq(config, "send", "doomed", "poison").returncode == 0
        worker = start_worker(config, "tests.handlers:always_fail", "doomed")
        assert wait_for(lambda: stats(config, "doomed")["dead_lettered"] == 1, timeout_s=40)
        assert stop(worker) == {"released": 1, "dead_lettered": 1}
        listed = kmq(config, "dlq", "list", "doomed")
        assert listed.returncode == 0 and "poison" in listed.stdout and "failed 2 time(s)" in listed.stdout
        assert "1 dead letter waiting" in listed.stderr
        redriven = kmq(config, "dlq", "redrive", "doomed")
        assert redriven.returncode == 0 and "redrove 1 message onto 'doomed'" in redriven.stdout
        # A redrive empties the view of what waits, as SQS's does; --all still shows the letter, marked.
        assert "0 dead letters waiting" in kmq(config, "dlq", "list", "doomed").stderr
        [letter] = json.loads(kmq(config, "dlq", "list", "doomed", "--all", "--json").stdout)
        assert (letter["payload"], letter["redriven"], letter["delivery_count"]) == ("poison", True, 2)
        worker = start_worker(config, "tests.handlers:record", "doomed")
        assert wait_for(lambda: stats(config, "doomed")["acked"] == 1, timeout_s=40)
        assert stop(worker) == {"acked": 1}


def test_a_poison_message_stops_at_the_default_max_deliveries_and_waits_on_the_dead_letter_topic_with_the_reason(
        kmq_config: ConfigFactory) -> None:
    # Given a worker whose handler always raises on one payload, and no max_deliveries set anywhere
    config = kmq_config(redelivery_timeout_ms=10_000)
    assert config.max_deliveries == DEFAULT_MAX_DELIVERIES == 10
    with tracker_thread(config):
        assert kmq(config, "send", "poisoned", "poison").returncode == 0
        worker = start_worker(config, "tests.handlers:always_fail", "poisoned")
        # Then it is dead-lettered at its 10th delivery, not retried for ever
        assert wait_for(lambda: stats(config, "poisoned")["dead_lettered"] == 1, timeout_s=90)
        time.sleep(1)  # a delivery past the limit would show in the counts
        assert stop(worker) == {"released": 9, "dead_lettered": 1}
    row = stats(config, "poisoned")
    assert (row["delivered"], row["released"], row["dead_lettered"]) == (10, 9, 1)
    [letter] = json.loads(kmq(config, "dlq", "list", "poisoned", "--json").stdout)
    assert letter["delivery_count"] == 10
    assert letter["reason"] == "failed 10 time(s), last: ValueError: this job can never succeed"


def test_stats_shows_in_flight_messages_while_a_slow_worker_holds_them(kmq_config: ConfigFactory) -> None:
    config = kmq_config(redelivery_timeout_ms=30_000)
    assert kmq(config, "send", "slow", "s-{i}", "--count", "3").returncode == 0
    worker = start_worker(config, "tests.handlers:slow", "slow", "--concurrency", "3", "--drain-timeout", "1")
    try:
        assert wait_for(lambda: stats(config, "slow")["in_flight"] == 3, timeout_s=40)
        table = kmq(config, "stats")
        assert table.returncode == 0
        row = next(line for line in table.stdout.splitlines() if line.startswith("slow "))
        assert (row.split()[1], row.split()[3]) == ("0", "3")  # waiting, in_flight
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)


def test_stats_counts_each_rejection_as_an_event_after_a_redrive_and_dead_lettered_as_the_state_now(
        kmq_config: ConfigFactory) -> None:
    # Given 6 messages a handler refused, 2 of them redriven and acked since
    config = kmq_config(redelivery_timeout_ms=10_000)
    assert kmq(config, "send", "picky", "job-{i}", "--count", "6").returncode == 0
    with Service(config).queue("picky").consumer() as consumer:
        for message in receive_n(consumer, 6):
            message.reject("not today")
        assert consumer.flush(30) == 0
    assert kmq(config, "dlq", "redrive", "picky", "--limit", "2").returncode == 0
    with tracker_thread(config), Service(config).queue("picky").consumer() as consumer:
        for message in receive_n(consumer, 2):
            message.ack()
        assert consumer.flush(30) == 0

    # When kmq stats reads the topics, then the 6 refusals are events and the 4 letters still waiting the state
    row = stats(config, "picky")
    assert (row["rejected"], row["dead_lettered"], row["acked"]) == (6, 4, 2), row
    table = kmq(config, "stats", "--queue", "picky").stdout.splitlines()
    header, values = table[0].split(), table[2].split()
    assert (values[header.index("rejected")], values[header.index("dead_lettered")]) == ("6", "4")


def test_a_worker_whose_metrics_port_is_taken_prints_that_one_line_and_nothing_else(
        kmq_config: ConfigFactory) -> None:
    import socket

    config = kmq_config()  # no tracker runs: a look at its group first would warn about it
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = kmq(config, "worker", "tests.handlers:record", "--queue", "q", "--metrics-port", str(port))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"kmq worker: error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"]
    assert result.stdout == ""


def stats(config: Config, queue: str) -> dict[str, int]:
    result = kmq(config, "stats", "--json", "--queue", queue)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("yaml_text", "env", "message"), [
    ("kafka: [1, 2]\n", {}, "kafka: must be a mapping of librdkafka settings, got list"),
    ("kafka: {no.such.prop: 1}\n", {}, 'No such configuration property: "no.such.prop"'),
    ("", {"KMQ_MAX_DELIVERY": "3"}, "KMQ_MAX_DELIVERY: unknown environment variable (did you mean "
                                    "KMQ_MAX_DELIVERIES?)"),
    ("max-delivery: 3\n", {}, "max-delivery: unknown configuration key"),
])
def test_a_mistyped_setting_in_the_file_or_the_environment_is_a_usage_error(
    kafka_bootstrap: str, tmp_path: Path, yaml_text: str, env: dict[str, str], message: str,
) -> None:
    path = tmp_path / "kmq.yaml"
    path.write_text(f"bootstrap_servers: {kafka_bootstrap}\n{yaml_text}")
    result = kmq(None, "stats", "--config", str(path), env=env, timeout=30)
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [f"kmq stats: error: {message}"]) \
        or (message in result.stderr and result.returncode == 2), result.stderr


def test_log_options_work_after_the_subcommand_and_the_output_is_json(kmq_config: ConfigFactory) -> None:
    config = kmq_config()
    result = kmq(config, "topics", "create", "--log-level", "info", "--log-json")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["topic_ready"] * 4


def test_dlq_commands_fail_when_the_dead_letter_topic_is_missing(kafka_bootstrap: str) -> None:
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"nodlq-{time.time_ns()}")
    for action in ("list", "redrive"):
        result = kmq(config, "dlq", action, "q", timeout=30)
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [
            f"kmq dlq: error: dead-letter topic '{config.dlq_topic}' does not exist: create it with "
            "`kmq topics create`"]


def test_topics_create_on_existing_topics_prints_their_real_partition_counts(kafka_bootstrap: str) -> None:
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"cli-{time.time_ns()}.m",
                    marker_topic=f"cli-{time.time_ns()}.mk")
    assert kmq(config, "topics", "create", "--partitions", "2", "--marker-partitions", "1").returncode == 0
    again = kmq(config, "topics", "create", "--partitions", "12")
    assert again.returncode == 0, again.stderr
    assert f"{config.message_topic}: exists (2 partitions; 12 requested, not changed)" in again.stdout


def test_a_closed_stdout_is_one_line_not_a_traceback(kmq_config: ConfigFactory) -> None:
    config = kmq_config()
    proc = subprocess.Popen([sys.executable, "-m", "kmq.cli", "topics", "check"], cwd=ROOT, env=env_for(config),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `kmq topics check | head -0`
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(30) == 1
    assert err.strip().splitlines() == ["kmq topics: error: output closed before it was all written (broken pipe)"]


def test_a_worker_in_process_mode_runs_the_handler_in_a_pool(kmq_config: ConfigFactory) -> None:
    config = kmq_config()
    assert kmq(config, "send", "cpu", "c-{i}", "--count", "5").returncode == 0
    worker = start_worker(config, "tests.handlers:record", "cpu", "--handler-processes", "--concurrency", "2")
    assert wait_for(lambda: stats(config, "cpu")["acked"] == 5, timeout_s=60)
    assert stop(worker) == {"acked": 5}


def test_the_worker_decorator_runs_a_function_over_a_queue(kmq_config: ConfigFactory) -> None:
    import threading

    from kmq import Message, Service

    config = kmq_config()
    queue = Service(config).queue("deco")
    seen: list[bytes] = []

    @queue.worker(concurrency=2)
    def handle(message: Message) -> None:
        seen.append(message.payload)

    with queue.producer() as producer:
        for i in range(4):
            producer.send(b"%d" % i)
    runner = threading.Thread(target=handle.run, kwargs={"install_signals": False})
    runner.start()
    try:
        assert wait_for(lambda: len(seen) == 4, timeout_s=30)
    finally:
        handle.stop()
        runner.join(30)
    assert sorted(seen) == [b"0", b"1", b"2", b"3"] and handle.counts == {"acked": 4}


def test_stats_shows_a_queue_nobody_consumes_and_counts_only_its_own_waiting_records(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config()
    assert kmq(config, "send", "idle", "i-{i}", "--count", "50").returncode == 0
    assert kmq(config, "send", "busy", "b-{i}", "--count", "30").returncode == 0
    worker = start_worker(config, "tests.handlers:record", "busy")
    assert wait_for(lambda: stats(config, "busy")["acked"] == 30, timeout_s=40)
    stop(worker)
    rows = {r["queue"]: r for r in json.loads(kmq(config, "stats", "--json").stdout)}
    assert (rows["idle"]["waiting"], rows["idle"]["in_flight"], rows["idle"]["delivered"]) == (50, 0, 0)
    assert rows["idle"]["oldest_waiting_age_s"] >= 0
    assert (rows["busy"]["waiting"], rows["busy"]["acked"]) == (0, 30)


def test_worker_and_tracker_refuse_a_markers_topic_on_create_time(kafka_bootstrap: str, admin: AdminClient) -> None:
    stamp = time.time_ns()
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"ct-{stamp}.m", marker_topic=f"ct-{stamp}.mk")
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in (config.message_topic, config.marker_topic,
                                                               config.dlq_topic)])
    for future in futures.values():
        future.result(30)
    try:
        for args in (["worker", "tests.handlers:record", "--queue", "q"], ["tracker"]):
            result = kmq(config, *args, timeout=60)
            assert result.returncode == 1, result.stderr
            assert f"markers topic '{config.marker_topic}' has message.timestamp.type=CreateTime" in \
                result.stderr.strip().splitlines()[-1]
    finally:
        admin.delete_topics([config.message_topic, config.marker_topic, config.dlq_topic])




def test_send_prints_ids_skips_blank_stdin_lines_and_takes_every_option_of_the_library(
    kmq_config: ConfigFactory,
) -> None:
    from tests.markers_io import read_topic

    config = kmq_config(partitions=1)
    one = kmq(config, "send", "opts", "x", "--ttl", "60", "--time-limit", "2.5")
    assert one.returncode == 0, one.stderr
    assert "sent 1 message (id 0:0) to 'opts'" in one.stdout
    many = kmq(config, "send", "opts", "--stdin", "--ids", stdin="a\n\nb\n  \n")
    assert many.returncode == 0, many.stderr
    assert many.stdout.split() == ["0:1", "0:2"]
    assert "sent 2 messages" in many.stderr and "2 blank lines skipped" in many.stderr
    [first, *_] = read_topic(config.bootstrap_servers, config.message_topic, timeout_s=10)
    headers = dict(first.headers() or [])
    assert headers["kmq-time-limit-ms"] == b"2500" and int(headers["kmq-expires-at-ms"]) > 0
