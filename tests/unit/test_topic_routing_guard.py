"""No part of kmq reads a topic or group name from the Config itself: each asks ``Config.topics_for(queue)`` or works
on the TopicSet it was given. A part that read ``config.message_topic`` would send or read a routed queue on the
default set's topics, and a tenant's process would meet another set's ACLs (docs/concepts/topic-sets.md)."""

from __future__ import annotations

import ast
from pathlib import Path

KMQ = Path(__file__).resolve().parents[2] / "kmq"
#: Config attributes that name one set's resources (the default set's).
DEFAULT_SET_NAMES = {"message_topic", "marker_topic", "dead_letter_topic", "dlq_topic", "tracker_group",
                     "consumer_group_prefix", "consumer_group"}
#: Where they may be read: the config and the routing themselves, and the demo (it passes its config on to the
#: processes it starts, as KMQ_* variables).
ALLOWED = {KMQ / "config.py", KMQ / "topic_sets.py", KMQ / "demo.py"}


def _config_reads(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and node.attr in DEFAULT_SET_NAMES):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
        if "config" in name.lower():  # config.x, self.config.x, self._config.x, kombu_config.x
            found.append(f"{path.relative_to(KMQ.parent)}:{node.lineno}: {name}.{node.attr}")
    return found


def test_no_part_of_kmq_reads_a_topic_or_group_name_from_the_config_itself() -> None:
    reads = [hit for path in sorted(KMQ.rglob("*.py")) if path not in ALLOWED for hit in _config_reads(path)]
    assert reads == []
