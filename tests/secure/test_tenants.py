"""Tenants on a secured broker (make test-secure): tenant A's credentials do all of A's work, including A's tracker;
every attempt on tenant B's queues fails at the broker with one line naming the resource and leaves B's messages
as they were; a wrong password is one line; no secret is ever logged. Runs in file order: the last test greps
everything the others printed and logged."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
from confluent_kafka.admin import AdminClient

from tests.markers_io import wait_for
from tests.secure.conftest import SecureRun

A_JOBS = [f"job-{i}" for i in range(8)] + ["retry-1", "reject-1"]
B_SENT = 5


def _stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(60)


def _done(secure: SecureRun) -> list[str]:
    path = secure.folder / "done"
    return sorted(path.read_text().split()) if path.exists() else []


def _counts(row: dict[str, object]) -> dict[str, object]:
    """A stats row without the ages (they grow by themselves)."""
    return {k: v for k, v in row.items() if not k.endswith("_age_s")}


def _stats(secure: SecureRun, who: str, *args: str) -> list[dict[str, object]]:
    shown = secure.kmq(who, "stats", "--json", *args)
    assert shown.returncode == 0, shown.stderr
    rows: list[dict[str, object]] = json.loads(shown.stdout)
    return rows


def test_tenant_a_sends_receives_acks_redrives_and_runs_its_own_tracker(secure: SecureRun) -> None:
    # Given A's tracker and worker, on A's credentials only
    tracker = secure.start("tenant-a", "tracker", "--set", "tenant-a", log_name="tracker-a")
    worker = secure.start("tenant-a", "worker", "tests.secure.handlers:handle", "--queue", "a.jobs",
                          "--backoff-base", "0.2", "--backoff-max", "0.5", log_name="worker-a")
    try:
        # When A sends jobs, one of which fails its first run and one of which is rejected once
        sent = secure.kmq("tenant-a", "send", "a.jobs", "--stdin", stdin="\n".join(A_JOBS))
        assert sent.returncode == 0, sent.stderr
        # Then the failed one comes back through A's tracker, the rejected one waits in A's dead letters...
        assert wait_for(lambda: len(_done(secure)) == len(A_JOBS) - 1, timeout_s=90), _done(secure)
        listed = secure.kmq("tenant-a", "dlq", "list", "a.jobs", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [d["payload"] for d in json.loads(listed.stdout)] == ["reject-1"]
        # ...and A redrives it: every job done once
        redriven = secure.kmq("tenant-a", "dlq", "redrive", "a.jobs")
        assert (redriven.returncode, redriven.stdout.strip()) == (0, "redrove 1 message onto 'a.jobs'")
        assert wait_for(lambda: _done(secure) == sorted(A_JOBS), timeout_s=60), _done(secure)
        [row] = _stats(secure, "tenant-a", "--set", "tenant-a")
        assert (row["queue"], row["topic_set"], row["acked"], row["waiting"], row["in_flight"]) == (
            "a.jobs", "tenant-a", len(A_JOBS), 0, 0)
        assert row["redelivered"] == 1  # the copy A's tracker made
    finally:
        assert _stop(worker) == 0, (secure.folder / "worker-a.log").read_text()[-2000:]
        assert _stop(tracker) == 0, (secure.folder / "tracker-a.log").read_text()[-2000:]
    tracker_log = (secure.folder / "tracker-a.log").read_text()
    assert "redelivered" in tracker_log and "kmq.tenant-a.tracker" in tracker_log


@pytest.fixture(scope="module")
def b_before(secure: SecureRun) -> list[dict[str, object]]:
    """Tenant B's queue, written by B's owner (here the super user), as it is before A tries anything."""
    sent = secure.kmq("admin", "send", "b.jobs", "b-{i}", "--count", str(B_SENT))
    assert sent.returncode == 0, sent.stderr
    return _stats(secure, "admin", "--queue", "b.jobs")


ATTEMPTS = {
    "send": (["send", "b.jobs", "from-a"], "messages topic 'kmq.tenant-b.messages'"),
    "receive": (["worker", "tests.secure.handlers:handle", "--queue", "b.jobs"],
                "messages topic 'kmq.tenant-b.messages'"),
    "stats": (["stats", "--queue", "b.jobs"], "topic 'kmq.tenant-b.markers'"),
    "inspect": (["inspect", "b.jobs", "0:0"], "consumer group 'kmq.tenant-b.consumer.b.jobs'"),
    "dlq list": (["dlq", "list", "b.jobs"], "group 'kmq.tenant-b.dlq-redrive.b.jobs'"),
    "redrive": (["dlq", "redrive", "b.jobs"], "dead-letter topic 'kmq.tenant-b.messages.dlq'"),
    "purge": (["purge", "b.jobs"], "control topic 'kmq.tenant-b.messages.control'"),
    "pause": (["pause", "b.jobs"], "control topic 'kmq.tenant-b.messages.control'"),
}


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_every_attempt_of_tenant_a_on_tenant_bs_queue_fails_in_one_line_naming_the_resource(
        secure: SecureRun, b_before: list[dict[str, object]], attempt: str) -> None:
    args, resource = ATTEMPTS[attempt]
    done = secure.kmq("tenant-a", *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert len(lines) == 1, lines
    assert "not authorized" in lines[0] and resource in lines[0], lines[0]


def test_tenant_bs_messages_are_untouched_and_hidden_from_tenant_a(secure: SecureRun,
                                                                   b_before: list[dict[str, object]]) -> None:
    # After every attempt above (they ran first, in file order)
    after = _stats(secure, "admin", "--queue", "b.jobs")
    assert [_counts(r) for r in after] == [_counts(r) for r in b_before]
    [row] = after
    assert (row["waiting"], row["delivered"], row["paused"], row["purged"]) == (B_SENT, 0, "", 0)
    listed = secure.kmq("admin", "dlq", "list", "b.jobs", "--json")
    assert json.loads(listed.stdout) == []
    # And A's metadata does not even name B's topics
    config = secure.config("tenant-a")
    seen = AdminClient({"bootstrap.servers": config.bootstrap_servers, **config.kafka}).list_topics(timeout=30)
    assert not [t for t in seen.topics if t.startswith("kmq.tenant-b.")]
    assert {t for t in seen.topics if t.startswith("kmq.tenant-a.")} == set(config.topic_set("tenant-a").topics)


@pytest.mark.parametrize("args", [["send", "a.jobs", "x"], ["worker", "tests.secure.handlers:handle", "--queue",
                                                            "a.jobs"], ["stats", "--set", "tenant-a"]])
def test_a_wrong_password_is_one_line_and_exit_1(secure: SecureRun, args: list[str]) -> None:
    done = secure.kmq("wrong", *args, timeout=30)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert len(lines) == 1 and "authentication failed" in lines[0], lines


def test_a_tracker_with_a_wrong_password_stops_at_once_saying_why(secure: SecureRun) -> None:
    # A tracker logs at info (its audit trail): its last line is the one error, and it does not wait for the broker
    done = secure.kmq("wrong", "tracker", "--set", "tenant-a", timeout=30)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert lines[-1].startswith("kmq tracker: error: authentication failed"), lines
    assert "tracker_waiting_for_kafka" not in done.stderr


def test_a_console_of_tenant_a_s_set_works_with_a_s_acls_only(secure: SecureRun) -> None:
    from kmq.console import topics
    from kmq.console.follower import Follower
    from kmq.console.model import Models
    from kmq.ops.stats import control_state
    from kmq.wire import now_ms
    from kmq.wire import vocabulary as v

    sent = secure.kmq("tenant-a", "send", "a.console", "c-{i}", "--count", "3")
    assert sent.returncode == 0, sent.stderr
    config = secure.config("tenant-a")
    own = config.topic_set("tenant-a")
    # A console of A's set (kmq console --set tenant-a) follows it on A's credentials: topics, groups, offsets
    models = Models([own])
    follower = Follower(config, models)
    try:
        follower.round()
    finally:
        follower.close()
    assert (models.status.error, models.status.caught_up) == ("", True)
    with models.lock:
        assert models["tenant-a"].live.summary("a.console").states[v.WAITING] == 3
        assert models["tenant-a"].workers.tracker_group is not None  # A's tracker group, described
    # and acts on A's control topic only
    topics.pause(config, [own], "a.console", None)
    assert control_state(config, own).paused("a.console", now_ms())
    topics.resume(config, [own], "a.console")
    assert not control_state(config, own).paused("a.console", now_ms())
    # A console of every set on A's credentials still follows A's set, and names each set it may not read
    everything = Models(list(config.all_topic_sets))
    follower = Follower(config, everything)
    try:
        follower.round()
    finally:
        follower.close()
    errors = everything.status.error.split("; ")
    assert [e.split(":")[0] for e in errors] == ["set default", "set tenant-b"], errors
    assert all("not authorized" in e for e in errors) and not everything.status.caught_up
    with everything.lock:
        assert everything["tenant-a"].live.summary("a.console").states[v.WAITING] == 3


def test_no_secret_in_any_log_line(secure: SecureRun) -> None:
    # Everything every command printed, and the worker's and tracker's logs, at debug level too
    debug = secure.kmq("tenant-a", "stats", "--set", "tenant-a", "--log-level", "debug")
    assert debug.returncode == 0, debug.stderr
    logged = secure.outputs + [path.read_text() for path in secure.log_files]
    assert len(secure.outputs) >= 2 * (len(ATTEMPTS) + 5) and secure.log_files
    leaked = [(who, line) for text in logged for line in text.splitlines()
              for who, password in secure.passwords.items() if password in line]
    assert leaked == []
