"""Refused credentials and ACLs as one-line errors naming the resource (kmq._kafka.errors, metadata, group)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError

from kmq._kafka.errors import Credentials, client_error
from kmq._kafka.group import GroupJoinWatch
from kmq._kafka.metadata import check_topic
from kmq.errors import AuthenticationError, AuthorizationError, TopicError


class _Info:
    def __init__(self, error: KafkaError | None) -> None:
        self.error = error
        self.partitions = {0: None}


def test_a_refused_operation_names_its_resource_in_one_line() -> None:
    err = client_error(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), "committed offsets of group 'g'")
    assert isinstance(err, AuthorizationError) and not err.retriable
    assert str(err).startswith("committed offsets of group 'g': not authorized (GROUP_AUTHORIZATION_FAILED)")
    assert "\n" not in str(err)


def test_refused_credentials_say_so_without_librdkafkas_timing() -> None:
    said = ("sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed (after 315ms in state "
            "AUTH_REQ)")
    err = client_error(KafkaError(KafkaError._AUTHENTICATION, said), "metadata")
    assert isinstance(err, AuthenticationError)
    assert str(err) == ("authentication failed: sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication "
                        "failed (check kafka.sasl.username and kafka.sasl.password)")


def test_a_topic_the_principal_may_not_see_is_not_called_missing() -> None:
    with pytest.raises(AuthorizationError, match=r"control topic 'p\.messages\.control': not authorized"):
        check_topic(_Info(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), "p.messages.control", "control")
    with pytest.raises(TopicError, match="messages topic 't' does not exist: create it"):
        check_topic(None, "t", "messages")
    check_topic(_Info(None), "t", "messages")


def test_a_group_member_refused_by_the_broker_fails_at_once() -> None:
    watch = GroupJoinWatch("p.consumer.q", "cooperative-sticky", bound_s=60)
    watch.topics = ["p.messages"]
    topic = watch.check(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), has_assignment=False)
    group = watch.check(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), has_assignment=False)
    login = watch.check(KafkaError(KafkaError._AUTHENTICATION, "bad password"), has_assignment=False)
    assert isinstance(topic, AuthorizationError) and "topic 'p.messages'" in str(topic)
    assert isinstance(group, AuthorizationError) and "consumer group 'p.consumer.q'" in str(group)
    assert isinstance(login, AuthenticationError)
    assert watch.check(KafkaError(KafkaError._TRANSPORT), has_assignment=False) is None


def test_refused_credentials_are_remembered_per_broker_and_user_from_when_they_were_refused() -> None:
    before = time.monotonic()
    watcher = Credentials.watcher("h:1", "alice")
    watcher(KafkaError(KafkaError._TRANSPORT))
    assert Credentials.refused_since("h:1", "alice", before) is None
    watcher(KafkaError(KafkaError._AUTHENTICATION, "refused"))
    assert Credentials.refused_since("h:1", "alice", before) == "refused"
    assert Credentials.refused_since("h:1", "bob", before) is None
    assert Credentials.refused_since("h:1", "alice", time.monotonic() + 1) is None
