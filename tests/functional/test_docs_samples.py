"""Every code sample of the documentation (docs/snippets, included into the pages with pymdownx.snippets) runs here as
written, against the run's real broker: Python files as ``python FILE``, shell files as ``bash -eu FILE``, with the
``KMQ_*`` environment that makes ``Config.load()`` give the test's config (topics and groups of its own).

Long-running samples (a worker, a tracker) run in the background until the test has seen them work, then get
SIGTERM and must exit 0, as the docs say. tests/unit/test_docs.py checks that every fenced block of the docs is a
snippet (or marked text, a diagram, a ``make`` target, or not run with a reason) and that every snippet has a test
here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kmq import Config, Service
from kmq.ops.dlq import list_dead_letters
from tests.helpers import ROOT, ConfigFactory, env_for, receive_expecting, receive_n, tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(240)

SNIPPETS = ROOT / "docs" / "snippets"
#: A sample's bound: a fresh process's group join and first fetch take a few seconds on a loaded machine.
RUN_TIMEOUT_S = 150


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the snippets, so samples run from a directory they may write to (and import each other from)."""
    target = tmp_path / "snippets"
    shutil.copytree(SNIPPETS, target)
    return target


def sample_env(config: Config) -> dict[str, str]:
    env = env_for(config)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the `kmq` command
    env.pop("KMQ_CONFIG", None)
    return env


def command(sample: str, workdir: Path, *, background: bool = False) -> list[str]:
    if not sample.endswith(".sh"):
        return [sys.executable, sample]
    if not background:
        return ["bash", "-eu", sample]
    # One command, typed into a terminal: exec'd, so SIGTERM reaches it (bash would die of it, not pass it on).
    lines = [line for line in (workdir / sample).read_text().splitlines() if line.strip()]
    assert len(lines) == 1, f"{sample}: a long-running sample is one command"
    return ["bash", "-euc", f"exec {lines[0]}"]


def run_sample(config: Config, workdir: Path, sample: str, timeout_s: float = RUN_TIMEOUT_S) -> str:
    """Runs a sample to its end; fails with its output unless it exits 0. Returns its stdout."""
    done = subprocess.run(command(sample, workdir), cwd=workdir, env=sample_env(config), capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    assert done.returncode == 0, f"{sample} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


class Background:
    """A long-running sample (a worker, a tracker): its output goes to files the test reads while it runs."""

    def __init__(self, config: Config, workdir: Path, sample: str) -> None:
        self.sample = sample
        name = Path(sample).stem
        self.out, self.err = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(command(sample, workdir, background=True), cwd=workdir,
                                         env=sample_env(config), stdout=out, stderr=err, text=True,
                                         start_new_session=True)

    def stdout(self) -> str:
        return self.out.read_text()

    def wait_for_output(self, text: str, timeout_s: float = 90) -> None:
        assert wait_for(lambda: text in self.stdout() or self.proc.poll() is not None, timeout_s), \
            f"{self.sample} printed no {text!r} within {timeout_s:.0f} s:\n{self.stdout()[-2000:]}\n{self.stderr()}"
        assert text in self.stdout(), f"{self.sample} exited {self.proc.returncode}:\n{self.stderr()}"

    def stderr(self) -> str:
        return self.err.read_text()[-3000:]

    def stop(self) -> int:
        """SIGTERM, as a terminal's Ctrl-C or a service manager would, then its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(f"{self.sample} did not stop within 60 s of SIGTERM:\n{self.stderr()}") from None


@contextmanager
def background(config: Config, workdir: Path, sample: str) -> Iterator[Background]:
    process = Background(config, workdir, sample)
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            os.killpg(process.proc.pid, signal.SIGKILL)
            process.proc.wait(10)


# --- getting started ---------------------------------------------------------------------------------------------

def test_quickstart(kmq_config: ConfigFactory, workdir: Path) -> None:
    out = run_sample(kmq_config(), workdir, "quickstart.py")
    assert """received b'{"to": "ada@example.com"}' delivery 1""" in out


def test_first_queue_in_five_minutes(kmq_config: ConfigFactory, workdir: Path) -> None:
    """The tutorial's terminals: topics, a tracker and a worker in the background, sends, stats, dead letters."""
    config = kmq_config()
    assert "ok" in run_sample(config, workdir, "sh/topics.sh")
    with background(config, workdir, "sh/tracker.sh") as tracker, \
            background(config, workdir, "sh/worker.sh") as worker:
        out = run_sample(config, workdir, "sh/send.sh")
        assert out.count("sent 1 message (id ") == 2
        worker.wait_for_output("sending email to ada@example.com (delivery 1)")
        assert wait_for(lambda: len(list_dead_letters(config, "emails")) == 1, 60, 1.0), "no dead letter within 60 s"
        stats = run_sample(config, workdir, "sh/stats.sh")
        assert "emails" in stats
        assert "not JSON" in stats
        assert "redrove 1 message onto" in run_sample(config, workdir, "sh/dlq.sh")
        assert worker.stop() == 0, worker.stderr()
        assert tracker.stop() == 0, tracker.stderr()
    summary = json.loads(worker.stdout().strip().splitlines()[-1])
    assert summary["acked"] == 1
    assert summary["rejected"] >= 1


# --- guides --------------------------------------------------------------------------------------------------

def test_library_in_20_lines(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    out = run_sample(config, workdir, "library.py")
    assert "sending email to ada@example.com" in out
    letters = list_dead_letters(config, "emails")
    assert [letter.payload for letter in letters] == [b"not json"]
    assert "Expecting value" in letters[0].reason


def test_consume_loop(kmq_config: ConfigFactory, workdir: Path) -> None:
    out = run_sample(kmq_config(), workdir, "consume_loop.py")
    assert sorted(line.split(" delivery")[0] for line in out.splitlines()) == ["job 0", "job 1", "job 2"]


def test_send_options(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    out = run_sample(config, workdir, "send_options.py")
    assert "durable: " in out
    assert "done: " in out
    # Of the six messages only those due now come: the delayed two stay with the consumer or the tracker.
    with Service(config).queue("emails").consumer() as consumer:
        got = receive_n(consumer, 4, timeout_s=60)
        payloads = sorted(m.payload for m in got)
        for message in got:
            message.ack()
    assert payloads == [b"async", b"may run 2 minutes", b"with headers", b"worthless after an hour"]
    limited = [m for m in got if m.payload == b"may run 2 minutes"]
    assert limited[0].time_limit == 120


def test_queue_control(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    out = run_sample(config, workdir, "queue_control.py")
    assert "purged messages enqueued before" in out
    emails = Service(config).queue("emails")
    with emails.producer() as producer:
        producer.send(b"fresh job")
    with emails.consumer() as consumer:  # the queue is not paused, and the stale job was purged
        got = receive_expecting(consumer, 1, timeout_s=60)
        for message in got:
            message.ack()
    assert [m.payload for m in got] == [b"fresh job"]


def test_queue_operations_from_the_command_line(kmq_config: ConfigFactory, workdir: Path) -> None:
    out = run_sample(kmq_config(), workdir, "sh/queue-ops.sh")
    assert "paused 'emails' until" in out
    assert "resumed 'emails'" in out
    assert "purging 'emails'" in out
    rows = json.loads(out[out.index("[\n"):])
    assert rows[0]["queue"] == "emails"


def test_deduplicated_sends(kmq_config: ConfigFactory, workdir: Path) -> None:
    out = run_sample(kmq_config(), workdir, "dedup_send.py")
    assert "handling b'{\"order\": 991, \"charge\": 42.0}' id order-991" in out
    assert "another one? None" in out


def test_schedules_from_python(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    out = run_sample(config, workdir, "schedules.py")
    assert "heartbeat * * * * * */10 UTC paused None" in out and "nightly-report 0 3 * * * Europe/Berlin next" in out
    assert "ran now: " in out
    assert [i.schedule.name for i in Service(config).schedules.list()] == ["nightly-report"]


def test_dedup_and_schedules_from_the_command_line(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    out = run_sample(config, workdir, "sh/dedup-schedules.sh")
    assert "added schedule 'nightly-report'" in out and "heartbeat" in out
    assert "removed schedule 'heartbeat'" in out
    with Service(config).queue("orders").consumer() as consumer:
        got = receive_expecting(consumer, 4, timeout_s=60)
        for message in got:
            message.ack()
    assert sorted(m.payload for m in got) == [b"order 0", b"order 1", b"order 2", b'{"order": 991}']


def test_at_most_once(kmq_config: ConfigFactory, workdir: Path) -> None:
    out = run_sample(kmq_config(), workdir, "at_most_once.py")
    assert "refused: queue 'metrics' is at-most-once" in out
    assert "processed b'cpu=0.93'" in out


def test_inspect_message(kmq_config: ConfigFactory, workdir: Path) -> None:
    out = run_sample(kmq_config(), workdir, "inspect_message.py")
    events = [line.split()[1] for line in out.splitlines() if line[:1].isdigit()]
    assert events == ["enqueued", "delivered", "acked"]
    assert out.strip().endswith("state: acked")


def test_decorated_worker(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    with background(config, workdir, "decorated_worker.py") as worker:
        with Service(config).queue("emails").producer() as producer:
            producer.send(b"ada@example.com")
        worker.wait_for_output("sending ada@example.com")
        assert worker.stop() == 0, worker.stderr()
    assert "'acked': 1" in worker.stdout().strip().splitlines()[-1]


def test_kmq_worker_with_a_tracker(kmq_config: ConfigFactory, workdir: Path) -> None:
    """The worker guide's handler: a valid job is acked; bad ones are dead letters at once, with their reason."""
    config = kmq_config()
    assert (workdir / "emails_worker.py").is_file()  # the handler module `kmq worker` imports from the directory
    with tracker_thread(config), background(config, workdir, "sh/worker.sh") as worker:
        with Service(config).queue("emails").producer() as producer:
            for payload in (b'{"to": "bob@example.com"}', b"{}", b"[oops"):
                producer.send(payload)
        worker.wait_for_output("sending email to bob@example.com")
        assert wait_for(lambda: len(list_dead_letters(config, "emails")) == 2, 60, 1.0)
        assert worker.stop() == 0, worker.stderr()
    reasons = sorted(letter.reason for letter in list_dead_letters(config, "emails"))
    assert reasons[0] == "missing 'to'"
    assert reasons[1].startswith("not JSON")


def test_dramatiq_sample(kmq_config: ConfigFactory, workdir: Path) -> None:
    pytest.importorskip("dramatiq")
    out = run_sample(kmq_config(), workdir, "dramatiq_tasks.py")
    assert "email to ada@example.com" in out
    assert "email to bob@example.com" in out


@pytest.mark.timeout(600)  # a Spark job of its own (not test_audit.py's session): not in that xdist group
@pytest.mark.spark
def test_audit_sample(kmq_config: ConfigFactory, workdir: Path) -> None:
    pytest.importorskip("pyspark")
    config = kmq_config()
    with Service(config).queue("emails").producer() as producer:
        producer.send(b"job")
    with Service(config).queue("emails").consumer() as consumer:
        got = receive_n(consumer, 1, timeout_s=60)
        got[0].ack()
    out = run_sample(config, workdir, "sh/audit.sh", timeout_s=480)  # Spark starts slowly on a loaded machine
    assert "emails" in out
    summary = json.loads((workdir / "audit-out" / "summary.json").read_text())
    assert summary["queues"]["emails"]["acked"] == 1


def test_groups(kmq_config: ConfigFactory, workdir: Path) -> None:
    out = run_sample(kmq_config(partitions=3), workdir, "groups.py")
    for account in ("account-7", "account-9"):
        assert f"{account} ['invoice 0', 'invoice 1', 'invoice 2']" in out, out
