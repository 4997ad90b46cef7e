"""Checks a command makes before it works, said on stderr."""

from __future__ import annotations

import structlog

from kmq.config import Config
from kmq.topic_sets import TopicSet


def warn_if_no_tracker(config: Config, topics: TopicSet) -> None:
    """Without a tracker nothing comes back: not a release, not what a crashed worker held. Said on stderr."""
    from kmq._kafka.offsets import group_members

    if group_members(config, topics.tracker_group) == 0:
        structlog.get_logger("kmq.cli").warning(
            "no_redelivery_tracker", group=topics.tracker_group,
            note="released messages and those of crashed workers will not come back until a tracker runs "
                 "(kmq tracker)")
