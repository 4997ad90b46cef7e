"""The kmq command line's answers to bad input, with no broker: one clear line and the right exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, run_kmq

pytestmark = pytest.mark.timeout(90)
NO_BROKER = {"KMQ_BOOTSTRAP_SERVERS": "127.0.0.1:1", "KMQ_CONNECT_TIMEOUT_MS": "1000"}


@pytest.mark.parametrize(("args", "code", "message"), [
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
    (["worker", "--queue", "q"], 2, "required: MODULE:FUNCTION"),
    (["worker", "nocolon", "--queue", "q"], 1, "handler must be MODULE:FUNCTION"),
    (["worker", "tests.handlers_broken:handle", "--queue", "q"], 1,
     "cannot import handler module 'tests.handlers_broken': ZeroDivisionError: division by zero "
     "(at tests/handlers_broken.py, line 3)"),
    (["send", "q", "x"], 1, "cannot reach Kafka at 127.0.0.1:1"),
    (["audit"], 1, "kmq audit: error: cannot reach Kafka at 127.0.0.1:1 within 1s"),  # was a TimeoutError traceback
    (["stats"], 1, "kmq stats: error: cannot reach Kafka at 127.0.0.1:1"),
    (["worker", "m:f", "--queue", "q", "--concurrency", "0"], 2, "--concurrency: must be >= 1, got 0"),
    (["worker", "m:f", "--queue", "q", "--backoff-base", "-1"], 2, "--backoff-base: must be >= 0, got -1"),
    (["worker", "m:f", "--queue", "q", "--backoff-base", "5", "--backoff-max", "1"], 2,
     "--backoff-max (1.0) is below --backoff-base (5.0)"),
    (["worker", "m:f", "--queue", "q", "--time-limit", "0"], 2, "--time-limit: must be > 0"),
    (["send", "q", "x", "--count", "-1"], 2, "--count: must be >= 1, got -1"),
    (["stats", "--log-level", "loud"], 2, "--log-level: must be one of debug"),
    (["dlq", "list", "q"], 1, "cannot reach Kafka at 127.0.0.1:1"),
    (["dlq", "redrive", "q"], 1, "cannot reach Kafka at 127.0.0.1:1"),
    (["tracker", "--metrics-port", "70000"], 2, "--metrics-port: must be >= 0 and <= 65535"),
    (["send", "q"], 2, "kmq send: error: nothing to send: give a PAYLOAD, --file or --stdin"),
    (["send", "q", "x", "--file", "f.json"], 2, "give one of PAYLOAD, --file and --stdin, not PAYLOAD and --file"),
    (["send", "q", "x", "--delay", "1", "--at", "2030-01-01T00:00"], 2, "give --delay or --at, not both"),
    (["send", "q", "x", "--ttl", "0"], 2, "--ttl: must be > 0, got 0"),
    (["send", "q", "x", "--frobnicate"], 2, "kmq send: error: unrecognized arguments: --frobnicate"),
    (["pause", "q", "--until", "2000-01-01T00:00"], 2, "--until 2000-01-01T00:00:00+00:00 is not in the future"),
])
def test_bad_input_is_one_clear_line_and_a_non_zero_exit(args: list[str], code: int, message: str) -> None:
    result = run_kmq(None, *args, env=NO_BROKER, timeout=30)
    assert result.returncode == code
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_malformed_yaml_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("bootstrap-servers: [oops\n")
    result = run_kmq(None, "stats", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kmq stats: error: invalid config: config_file: {path} is not valid YAML: expected ',' or ']', but got "
        "'<stream end>' at line 2, column 1"]


def test_a_tracker_without_a_broker_says_so_every_few_seconds_and_stops_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KMQ_BOOTSTRAP_SERVERS": "127.0.0.1:1",
           "KMQ_CONNECT_TIMEOUT_MS": "1000"}
    proc = subprocess.Popen([sys.executable, "-m", "kmq.cli", "tracker"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    complaints = []
    deadline = time.monotonic() + 30
    for line in proc.stderr:
        if "tracker_waiting_for_kafka" in line:
            complaints.append(time.monotonic())
        if len(complaints) == 2 or time.monotonic() > deadline:
            break
    assert len(complaints) == 2 and complaints[1] - complaints[0] < 10
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0



def test_a_metrics_port_in_use_is_one_line_and_exit_1_before_anything_else() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_kmq(None, "tracker", "--metrics-port", str(port), env=NO_BROKER, timeout=30)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"kmq tracker: error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"], result.stderr


def test_a_worker_whose_metrics_port_is_in_use_says_only_that_before_asking_the_broker_anything() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # No broker: a look at the tracker group (or any other broker call) before the bind would say so first.
        result = run_kmq(None, "worker", "tests.handlers:record", "--queue", "q", "--metrics-port", str(port),
                         env=NO_BROKER, timeout=30)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"kmq worker: error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"], result.stderr
    assert result.stdout == ""  # no counts of a worker that never ran


def test_every_send_option_of_the_library_is_a_kmq_send_option() -> None:
    import inspect

    from kmq import Producer
    from kmq.cli import build_parser

    options = {name for name, param in inspect.signature(Producer.send_async).parameters.items()
               if param.kind is inspect.Parameter.KEYWORD_ONLY}
    send = build_parser()._subparsers._group_actions[0].choices["send"]  # type: ignore[attr-defined]
    dests = {action.dest for action in send._actions}
    assert options <= dests, f"kmq send lacks {sorted(options - dests)}"
