"""/healthz: unhealthy, with the reason, when the broker does not answer or the markers topic is missing."""

from __future__ import annotations

import urllib.error
import urllib.request
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from kmq.metrics_http import BrokerProbe, Pulse, TrackerPresence, Unassigned, first_problem, serve
from tests.helpers import free_port


class _Client:
    def __init__(self) -> None:
        self.topics: dict[str, object] = {"kmq.markers": SimpleNamespace(error=None)}
        self.down = False
        self.calls = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object:
        self.calls += 1
        if self.down:
            raise RuntimeError("KafkaError{code=_TRANSPORT}")
        return SimpleNamespace(topics=self.topics)


def test_the_probe_reports_an_unreachable_broker_and_a_missing_topic_and_caches_its_answer() -> None:
    client, now = _Client(), [0.0]
    probe = BrokerProbe(client, "kmq.markers", lambda: now[0])
    assert probe() is None
    client.down = True
    assert probe() is None and client.calls == 1  # cached for 5 s
    now[0] = 5.0
    assert "broker unreachable" in (probe() or "")
    client.down, client.topics, now[0] = False, {}, 10.0
    assert probe() == "topic 'kmq.markers' does not exist"


def test_healthz_is_503_with_the_reason_and_binds_loopback() -> None:
    problem: list[str | None] = [None]
    port = free_port()
    server = serve(CollectorRegistry(), "127.0.0.1", port, lambda: problem[0])
    try:
        assert server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as ok:
            assert ok.status == 200
        problem[0] = "broker unreachable: down"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
            raise AssertionError("expected 503")
        except urllib.error.HTTPError as err:
            assert err.code == 503 and b"broker unreachable" in err.read()
    finally:
        server.shutdown()
        server.server_close()


def test_the_probe_names_leaderless_partitions_and_calls_under_replication_degraded() -> None:
    client = _Client()
    parts = {0: SimpleNamespace(leader=1, replicas=[1, 2, 3], isrs=[1, 2, 3]),
             1: SimpleNamespace(leader=2, replicas=[2, 3, 1], isrs=[2, 3])}
    client.topics = {"m": SimpleNamespace(error=None, partitions=parts)}
    now = [0.0]
    probe = BrokerProbe(client, "m", lambda: now[0])
    assert probe() == "degraded: topic 'm': 1 of 2 partitions under-replicated (a broker is down or catching up)"
    parts[1] = SimpleNamespace(leader=-1, replicas=[2, 3, 1], isrs=[])
    now[0] = 5.0
    assert probe() == "topic 'm': no leader for partitions [1] (leader not available)"


def test_the_probe_is_unhealthy_while_writes_wait_unacknowledged_whatever_metadata_says() -> None:
    stalled = [0.5]
    probe = BrokerProbe(_Client(), "kmq.markers", lambda: 0.0, stalled=lambda: stalled[0])
    assert probe() is None
    stalled[0] = 4.2
    assert (probe() or "").startswith("writes to Kafka unacknowledged for 4 s")


def test_degraded_is_served_as_200_with_what_is_short() -> None:
    port = free_port()
    server = serve(CollectorRegistry(), "127.0.0.1", port, lambda: "degraded: topic 'm': 1 of 2 under-replicated")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as ok:
            assert ok.status == 200 and ok.read() == b"ok (degraded: topic 'm': 1 of 2 under-replicated)\n"
    finally:
        server.shutdown()
        server.server_close()


def test_without_a_tracker_health_is_degraded_and_the_group_is_asked_at_most_every_30_s() -> None:
    answers, now = [0], [0.0]
    asked: list[float] = []

    def members() -> int | None:
        asked.append(now[0])
        return answers[0]

    presence = TrackerPresence(members, "kmq-trackers", lambda: now[0])
    assert presence() == ("degraded: no redelivery tracker in group 'kmq-trackers' (released messages and those of "
                          "crashed workers do not come back until one runs)")
    answers[0] = 2
    now[0] = 29.0
    assert presence() is not None and asked == [0.0], "cached"
    now[0] = 30.0
    assert presence() is None
    answers[0] = None  # type: ignore[list-item]  # the broker cannot say: not reported as missing
    now[0] = 60.0
    assert presence() is None and asked == [0.0, 30.0, 60.0]


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_readyz_says_route_work_here_and_livez_says_restart_me_each_from_its_own_check() -> None:
    ready: list[str | None] = ["holds no markers partition while [0] of 'm' have no tracker, for 31 s"]
    live: list[str | None] = [None]
    port = free_port()
    server = serve(CollectorRegistry(), "127.0.0.1", port, lambda: ready[0], live=lambda: live[0])
    try:
        assert _get(port, "/readyz") == (503, b"unhealthy: " + ready[0].encode() + b"\n")  # type: ignore[union-attr]
        assert _get(port, "/healthz")[0] == 503, "/healthz answers as /readyz"
        assert _get(port, "/livez") == (200, b"ok\n"), "not ready is not a reason to restart"
        live[0] = "the tracker's loop has not turned for 121 s"
        assert _get(port, "/livez") == (503, b"unhealthy: the tracker's loop has not turned for 121 s\n")
    finally:
        server.shutdown()
        server.server_close()


def test_a_member_holding_nothing_is_unhealthy_only_past_its_bound_and_only_if_its_group_needs_it() -> None:
    idle, needed = [10.0], ["out of group 'g' while markers partitions [1] have no tracker"]
    check = Unassigned(lambda: idle[0], lambda: needed[0], bound_s=30.0)
    assert check() is None, "within the bound: a rebalance takes time"
    idle[0] = 31.4
    assert check() == "out of group 'g' while markers partitions [1] have no tracker, for 31 s"
    needed[0] = None  # type: ignore[call-overload]  # a standby: every partition has a member
    assert check() is None


def test_a_loop_that_stops_turning_is_reported_past_its_bound() -> None:
    now = [0.0]
    pulse = Pulse("the loop", 120.0, lambda: now[0])
    now[0] = 119.0
    assert pulse() is None
    now[0] = 125.0
    assert pulse() == "the loop has not turned for 125 s"
    pulse.beat()
    assert pulse() is None


def test_the_first_unhealthy_answer_wins_over_a_degraded_one() -> None:
    assert first_problem(lambda: "degraded: short", lambda: "broker unreachable") == "broker unreachable"
    assert first_problem(lambda: None, lambda: "degraded: short") == "degraded: short"
    assert first_problem(lambda: None) is None
