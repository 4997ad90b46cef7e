"""Durable defaults without a broker: the replication kmq picks per cluster size, and the weaknesses it names."""

from __future__ import annotations

import pytest

from kmq._kafka.durability import TopicDurability, replication_for, warnings
from kmq.config import MAX_REDELIVERY_TIMEOUT_MS


@pytest.mark.parametrize(("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (7, (3, 2))])
def test_replication_follows_the_cluster_up_to_three_with_one_less_in_sync(brokers: int,
                                                                           expected: tuple[int, int]) -> None:
    assert replication_for(brokers) == expected


def topic(name: str = "t", replication: int = 3, min_insync: int = 2, unclean: bool = False,
          retention_ms: int = 7 * 24 * 3600 * 1000) -> TopicDurability:
    return TopicDurability(name, replication, min_insync, unclean, retention_ms)


def test_a_topic_made_by_kmq_topics_create_has_no_warning() -> None:
    assert warnings([topic(), topic("mk", retention_ms=-1)], 3, "mk") == []
    assert warnings([topic(replication=1, min_insync=1)], 1, "mk") == []  # one broker: nothing better exists


def test_each_weakness_is_one_line_naming_the_topic() -> None:
    found = warnings([topic("m", replication=1, min_insync=1), topic("d", min_insync=1),
                      topic("u", unclean=True), topic("mk", retention_ms=MAX_REDELIVERY_TIMEOUT_MS - 1),
                      topic("x", replication=2, min_insync=3)], 3, "mk")
    assert [line.split(":", 1)[0] for line in found] == ["m", "d", "u", "mk", "x"]
    assert "replication factor 1 on a 3-broker cluster" in found[0]
    assert "min.insync.replicas=1 with replication factor 3" in found[1]
    assert "unclean.leader.election.enable=true" in found[2]
    assert "shorter than the 12 h redelivery cap" in found[3]
    assert "every acks=all write fails" in found[4]


def test_retention_is_only_checked_on_the_markers_topic() -> None:
    assert warnings([topic("m", retention_ms=1000)], 3, "mk") == []


def test_every_kmq_producer_writes_with_acks_all_and_idempotence_and_no_setting_can_weaken_it() -> None:
    from kmq._kafka.settings import markers_producer_settings, messages_producer_settings
    from kmq.config import Config
    from kmq.errors import ConfigError

    config = Config(bootstrap_servers="x")
    for settings in (messages_producer_settings(config, "c"), markers_producer_settings(config, "c")):
        assert settings["enable.idempotence"] is True  # implies acks=all (librdkafka refuses a weaker acks with it)
        assert settings.get("acks", "all") in ("all", -1)
    for key in ("acks", "enable.idempotence"):
        with pytest.raises(ConfigError):
            Config(bootstrap_servers="x", kafka={key: "1"})
