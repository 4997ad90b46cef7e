"""Topic sets and routing (kmq.topic_sets, Config.topics_for): names, first match wins, validation, compatibility."""

from __future__ import annotations

import pickle
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq.config import Config
from kmq.errors import ConfigError
from kmq.topic_sets import DEFAULT_SET

BASE = {"bootstrap_servers": "127.0.0.1:9092"}
SETS = {"tenant-a": {}, "reports": {"prefix": "acme.reports"}}
ROUTES = [{"queues": "tenant-a.*", "set": "tenant-a"}, {"queues": ["reports", "reports-*"], "set": "reports"}]


def test_without_rules_every_queue_is_in_the_default_set_with_todays_names() -> None:
    # Given a configuration without topic sets (kafka-mq-go's names, or a deployment's own)
    config = Config(**BASE, message_topic="app.messages", marker_topic="app.markers", tracker_group="app-tracker",
                    consumer_group_prefix="app-")
    # When any queue asks where it lives
    topics = config.topics_for("emails")
    # Then it is the one set there is, with the names kmq used before topic sets
    assert config.all_topic_sets == (topics,) and topics.name == DEFAULT_SET and topics.is_default
    assert topics.topics == ("app.messages", "app.markers", "app.messages.dlq", "app.messages.control")
    assert topics.consumer_group("emails") == "app-emails" == config.consumer_group("emails")
    assert topics.tracker_group == "app-tracker"
    assert topics.redrive_group("emails") == "kmq-dlq-redrive-emails"
    assert topics.private_group("replay").startswith("kmq-replay-")
    assert config.reading_sets("emails") == (topics,)


def test_kafka_mq_go_defaults_are_the_default_set() -> None:
    topics = Config(**BASE).default_topics
    assert (topics.messages, topics.markers, topics.tracker_group, topics.consumer_group("q")) == (
        "kmq.messages", "kmq.markers", "kafka-mq-redelivery", "kafka-mq-q")


def test_every_resource_of_a_named_set_is_under_its_prefix() -> None:
    config = Config(**BASE, topic_sets=SETS, routes=ROUTES)
    for name, prefix in (("tenant-a", "kmq.tenant-a."), ("reports", "acme.reports.")):
        topics = config.topic_set(name)
        resources = [*topics.topics, topics.tracker_group, topics.consumer_group("any queue"),
                     topics.redrive_group("any queue"), topics.private_group("replay")]
        assert topics.acl_prefix == prefix
        assert all(r.startswith(prefix) for r in resources), resources
    a = config.topic_set("tenant-a")
    assert a.topics == ("kmq.tenant-a.messages", "kmq.tenant-a.markers", "kmq.tenant-a.messages.dlq",
                        "kmq.tenant-a.messages.control")
    assert (a.tracker_group, a.consumer_group("tenant-a.jobs")) == ("kmq.tenant-a.tracker",
                                                                     "kmq.tenant-a.consumer.tenant-a.jobs")


def test_routes_send_matching_queues_to_their_set_and_the_rest_to_the_default() -> None:
    config = Config(**BASE, topic_sets=SETS, routes=ROUTES)
    assert config.topics_for("tenant-a.jobs").name == "tenant-a"
    assert config.topics_for("reports").name == "reports"
    assert config.topics_for("reports-daily").name == "reports"
    assert config.topics_for("reportsX").name == DEFAULT_SET  # a pattern matches the whole name
    assert config.topics_for("Tenant-A.jobs").name == DEFAULT_SET  # case-sensitively
    assert config.topics_for("emails").name == DEFAULT_SET


def test_a_draining_route_reads_the_new_set_then_the_old_one() -> None:
    config = Config(**BASE, topic_sets=SETS,
                    routes=[{"queues": "reports", "set": "reports", "draining": "default"}])
    assert config.topics_for("reports").name == "reports"
    assert [s.name for s in config.reading_sets("reports")] == ["reports", DEFAULT_SET]
    assert [s.name for s in config.reading_sets("emails")] == [DEFAULT_SET]


PATTERN = st.text(alphabet="ab*?", min_size=1, max_size=4)
QUEUE = st.text(alphabet="abc", min_size=1, max_size=5)


@given(routes=st.lists(st.tuples(st.lists(PATTERN, min_size=1, max_size=3), st.sampled_from(["x", "y", "default"])),
                       max_size=5),
       queues=st.lists(QUEUE, max_size=10))
def test_the_first_matching_route_wins(routes: list[tuple[list[str], str]], queues: list[str]) -> None:
    config = Config(**BASE, topic_sets={"x": {}, "y": {}},
                    routes=[{"queues": patterns, "set": target} for patterns, target in routes])
    for queue in queues:
        expected = next((target for patterns, target in routes if any(fnmatchcase(queue, p) for p in patterns)),
                        DEFAULT_SET)
        assert config.topics_for(queue).name == expected
        assert config.topics_for(queue) is config.topics_for(queue)  # the one answer, remembered


def test_routing_survives_pickling_replace_and_yaml(tmp_path: Path) -> None:
    config = Config(**BASE, topic_sets=SETS, routes=[*ROUTES, {"queues": "x", "set": "reports",
                                                                "draining": "tenant-a"}])
    for copy in (pickle.loads(pickle.dumps(config)), config.replace(max_deliveries=3)):
        assert copy.routes == config.routes and dict(copy.topic_sets) == dict(config.topic_sets)
        assert copy.reading_sets("x") == config.reading_sets("x")
    path = tmp_path / "kmq.yaml"
    path.write_text("bootstrap_servers: b:9092\ntopic_sets:\n  tenant-a: {}\n  reports: {prefix: acme.reports}\n"
                    "routes:\n  - {queues: 'tenant-a.*', set: tenant-a}\n  - queues: [reports]\n    set: reports\n")
    loaded = Config.from_yaml(path, env={})
    assert loaded.topics_for("tenant-a.q").messages == "kmq.tenant-a.messages"
    assert loaded.topics_for("reports").markers == "acme.reports.markers"


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"topic_sets": ["a"]}, "topic_sets", "must be a mapping"),
    ({"topic_sets": {"": {}}}, "topic_sets", "must be non-empty"),
    ({"topic_sets": {"a b": {}}}, "topic_sets", "a b"),
    ({"topic_sets": {"default": {}}}, "topic_sets.default", "name of the default set"),
    ({"topic_sets": {"a": "x"}}, "topic_sets.a", "must be a mapping"),
    ({"topic_sets": {"a": {"prefx": "p"}}}, "topic_sets.a.prefx", "did you mean prefix"),
    ({"topic_sets": {"a": {"prefix": "p."}}}, "topic_sets.a.prefix", "not end with"),
    ({"topic_sets": {"a": {"prefix": "p q"}}}, "topic_sets.a.prefix", "must be of"),
    ({"topic_sets": {"a": {"prefix": "p" * 201}}}, "topic_sets.a.prefix", "at most 200"),
    ({"topic_sets": {"a": {}, "b": {"prefix": "kmq.a.b"}}}, "topic_sets.b.prefix", "under set a's prefix"),
    ({"topic_sets": {"a": {}, "b": {"prefix": "kmq.a"}}}, "topic_sets.", "under set"),
    ({"topic_sets": {"messages": {}}}, "topic_sets.messages.prefix", "default set's 'kmq.messages"),
    ({"topic_sets": {"a": {"prefix": "kmq"}}}, "topic_sets.a.prefix", "default set's"),
    ({"topic_sets": {"a": {"prefix": "kafka-mq-x"}}}, "topic_sets.a.prefix", "group prefix 'kafka-mq-'"),
    ({"routes": {"queues": "x"}}, "routes", "must be a list"),
    ({"routes": ["x"]}, "routes[0]", "must be a mapping"),
    ({"routes": [{"set": "default"}]}, "routes[0].queues", "missing"),
    ({"routes": [{"queues": "x"}]}, "routes[0].set", "missing"),
    ({"routes": [{"queues": [], "set": "default"}]}, "routes[0].queues", "pattern"),
    ({"routes": [{"queues": "x", "set": "tenant"}]}, "routes[0].set", "'tenant' is not a topic set"),
    ({"routes": [{"queues": "x", "set": "default", "drain": "a"}]}, "routes[0].drain", "did you mean draining"),
    ({"routes": [{"queues": "x", "set": "default", "draining": "default"}]}, "routes[0].draining", "own set"),
])
def test_each_bad_set_or_route_is_a_one_line_config_error(changes: dict[str, object], field: str,
                                                          says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config(**BASE, **changes)  # type: ignore[arg-type]
    assert caught.value.field.startswith(field) and says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_unknown_set_name_is_a_config_error_naming_the_sets() -> None:
    config = Config(**BASE, topic_sets=SETS)
    with pytest.raises(ConfigError, match="'tenant-b' is not configured \\(sets: default, tenant-a, reports\\)"):
        config.topic_set("tenant-b")

