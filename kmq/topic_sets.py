"""Topic sets and routing: which topics and groups a queue lives on (docs/concepts/topic-sets.md).

A ``TopicSet`` is the messages, markers, dead-letter and control topics and the consumer groups that read them; a
named set keeps all of them under its prefix, so one prefixed ACL per resource type gives a principal one set.
``Routing`` maps queue names to sets by the configuration's routes (first match wins; the default set otherwise);
``Config.topics_for(queue)`` is what every part of kmq asks. Pure: no Kafka imports.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from kmq import wire
from kmq.errors import ConfigError
from kmq.wire.control import control_topic

#: The name of the set a queue no route matches lives in (today's topics and groups).
DEFAULT_SET = "default"
#: The prefix of a named set without one: ``kmq.<name>``.
DEFAULT_PREFIX = "kmq."
#: A prefix leaves room for its longest topic name (``P.messages.control``) within Kafka's 249 characters.
MAX_PREFIX_LENGTH = 200
SET_KEYS = ("prefix",)
ROUTE_KEYS = ("queues", "set", "draining")
#: Lookups remembered per routing (queue names are few in practice; a flood of new names clears it).
CACHE_SIZE = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSet:
    """The Kafka resources of one topic set: its four topics and its consumer groups' names."""

    #: ``default``, or the name the configuration gives the set.
    name: str
    messages: str
    markers: str
    dead_letters: str
    control: str
    tracker_group: str
    #: A queue's consumer group is this prefix and the queue's name.
    consumer_group_prefix: str
    redrive_group_prefix: str
    private_group_prefix: str
    #: What every resource of a named set starts with (``P.``), the name of its prefixed ACLs; "" for the default
    #: set, whose resources share no prefix.
    acl_prefix: str = ""

    @classmethod
    def named(cls, name: str, prefix: str) -> TopicSet:
        """A named set: every resource under ``prefix`` and a dot."""
        p = f"{prefix}."
        messages = f"{p}{wire.SET_MESSAGES_TOPIC}"
        return cls(name=name, messages=messages, markers=f"{p}{wire.SET_MARKERS_TOPIC}",
                   dead_letters=f"{messages}{wire.DLQ_SUFFIX}", control=control_topic(messages),
                   tracker_group=f"{p}{wire.SET_TRACKER_GROUP}", consumer_group_prefix=f"{p}{wire.SET_CONSUMER_GROUP}",
                   redrive_group_prefix=f"{p}{wire.SET_REDRIVE_GROUP}", private_group_prefix=p, acl_prefix=p)

    @property
    def topics(self) -> tuple[str, str, str, str]:
        """The messages, markers, dead-letter and control topics."""
        return self.messages, self.markers, self.dead_letters, self.control

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_SET

    def consumer_group(self, queue: str) -> str:
        """The consumer group of ``queue`` in this set."""
        return wire.consumer_group(queue, self.consumer_group_prefix)

    def redrive_group(self, queue: str) -> str:
        """The group that remembers how far ``kmq dlq redrive`` moved ``queue``'s dead letters of this set."""
        return wire.redrive_group(queue, self.redrive_group_prefix)

    def private_group(self, purpose: str) -> str:
        """A new one-reader group (a replay, a control follower, a read-back) in this set."""
        return wire.private_group(purpose, self.private_group_prefix)


@dataclass(frozen=True, slots=True)
class Route:
    """Queues whose names match one of ``patterns`` live in ``set``; with ``draining``, some of their messages are
    still in that set (the queue is moving: docs/concepts/topic-sets.md)."""

    patterns: tuple[str, ...]
    set: str
    draining: str | None = None

    def matches(self, queue: str) -> bool:
        return any(fnmatchcase(queue, pattern) for pattern in self.patterns)


class Routing:
    """The sets and the routes of one configuration: ``topics_for(queue)`` and the sets a queue is read from."""

    def __init__(self, default: TopicSet, named: Sequence[TopicSet] = (), routes: Sequence[Route] = ()) -> None:
        self.default = default
        self.sets: dict[str, TopicSet] = {DEFAULT_SET: default, **{s.name: s for s in named}}
        self.routes = tuple(routes)
        self._cache: dict[str, Route | None] = {}

    def route(self, queue: str) -> Route | None:
        """The first route that matches ``queue``, or None (the default set)."""
        try:
            return self._cache[queue]
        except KeyError:
            pass
        found = next((r for r in self.routes if r.matches(queue)), None)
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[queue] = found
        return found

    def topics_for(self, queue: str) -> TopicSet:
        """The set ``queue`` lives in: where it is sent, consumed, tracked, counted and controlled."""
        route = self.route(queue)
        return self.default if route is None else self.sets[route.set]

    def reading_sets(self, queue: str) -> tuple[TopicSet, ...]:
        """Every set that may hold ``queue``'s messages: its own, then the one it is moving from."""
        route = self.route(queue)
        if route is None:
            return (self.default,)
        if route.draining is None:
            return (self.sets[route.set],)
        return self.sets[route.set], self.sets[route.draining]

    def named(self, name: str) -> TopicSet:
        """The set called ``name``; ConfigError (one line, naming the sets there are) for another name."""
        try:
            return self.sets[name]
        except KeyError:
            raise ConfigError("topic set", f"{name!r} is not configured (sets: {', '.join(self.sets)})") from None


# --- from the configuration's data ---------------------------------------------------------------------------------

def parse_sets(data: object, default: TopicSet) -> list[TopicSet]:
    """``topic_sets``: a mapping of set name to ``{prefix: …}`` (or nothing: ``kmq.<name>``), checked so that no
    set's resources fall under another's prefix."""
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise ConfigError("topic_sets", f"must be a mapping of set name to {{prefix: …}}, got {type(data).__name__}")
    sets = [_parse_set(name, spec) for name, spec in data.items()]
    _check_apart(sets, default)
    return sets


def _parse_set(name: object, spec: object) -> TopicSet:
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ConfigError("topic_sets", f"set name {name!r} must be non-empty, of [a-zA-Z0-9._-]")
    if name == DEFAULT_SET:
        raise ConfigError(f"topic_sets.{name}", "is the name of the default set (the topics of message_topic and "
                                                "marker_topic): give the set another name")
    spec = {} if spec is None else spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"topic_sets.{name}", f"must be a mapping ({{prefix: …}}), got {type(spec).__name__}")
    _no_unknown_keys(f"topic_sets.{name}", spec, SET_KEYS)
    prefix = spec.get("prefix", f"{DEFAULT_PREFIX}{name}")
    if (not isinstance(prefix, str) or not prefix or prefix.endswith(".") or len(prefix) > MAX_PREFIX_LENGTH
            or not all(c.isalnum() or c in "._-" for c in prefix)):
        raise ConfigError(f"topic_sets.{name}.prefix", f"{prefix!r} must be of [a-zA-Z0-9._-], not end with '.', "
                                                       f"at most {MAX_PREFIX_LENGTH} characters")
    return TopicSet.named(name, prefix)


def _check_apart(sets: list[TopicSet], default: TopicSet) -> None:
    # A prefixed ACL on P. must cover one set and nothing of another: no prefix under another's, and no default-set
    # name under one (including the groups the default set names after arbitrary queue names).
    for one in sets:
        for other in sets:
            if one is not other and one.acl_prefix.startswith(other.acl_prefix):
                raise ConfigError(f"topic_sets.{one.name}.prefix",
                                  f"{one.acl_prefix[:-1]!r} lies under set {other.name}'s prefix "
                                  f"{other.acl_prefix!r}: an ACL on it would cover both sets")
        for resource in (*default.topics, default.tracker_group):
            if resource.startswith(one.acl_prefix):
                raise ConfigError(f"topic_sets.{one.name}.prefix",
                                  f"{one.acl_prefix[:-1]!r} would put the default set's {resource!r} under "
                                  f"{one.acl_prefix!r}: choose another prefix")
        for group_prefix in (default.consumer_group_prefix, default.redrive_group_prefix):
            if one.acl_prefix.startswith(group_prefix):
                raise ConfigError(f"topic_sets.{one.name}.prefix",
                                  f"{one.acl_prefix[:-1]!r} starts with the default set's group prefix "
                                  f"{group_prefix!r}: a default queue's group could fall under it")


def parse_routes(data: object, sets: Mapping[str, TopicSet]) -> list[Route]:
    """``routes``: a list of ``{queues: PATTERN | [PATTERN, …], set: NAME, draining: NAME}``, in order."""
    if data is None:
        return []
    if isinstance(data, str | bytes) or not isinstance(data, Sequence):
        raise ConfigError("routes", f"must be a list of {{queues: …, set: …}}, got {type(data).__name__}")
    return [_parse_route(f"routes[{i}]", item, sets) for i, item in enumerate(data)]


def _parse_route(where: str, item: object, sets: Mapping[str, TopicSet]) -> Route:
    if isinstance(item, Route):
        item = route_data(item)
    if not isinstance(item, Mapping):
        raise ConfigError(where, f"must be a mapping {{queues: …, set: …}}, got {type(item).__name__}")
    _no_unknown_keys(where, item, ROUTE_KEYS)
    for key in ("queues", "set"):
        if key not in item:
            raise ConfigError(f"{where}.{key}", "missing")
    queues = item["queues"]
    patterns = (queues,) if isinstance(queues, str) else queues
    if (not isinstance(patterns, Sequence) or not patterns
            or not all(isinstance(p, str) and p for p in patterns)):
        raise ConfigError(f"{where}.queues", f"must be a queue-name pattern or a list of them, got {queues!r}")
    target = _set_name(f"{where}.set", item["set"], sets)
    draining = item.get("draining")
    if draining is not None:
        draining = _set_name(f"{where}.draining", draining, sets)
        if draining == target:
            raise ConfigError(f"{where}.draining", f"names the route's own set {target!r}: a queue moves from "
                                                   "another set")
    return Route(tuple(patterns), target, draining)


def _set_name(where: str, name: object, sets: Mapping[str, TopicSet]) -> str:
    if not isinstance(name, str) or name not in sets:
        close = difflib.get_close_matches(str(name), list(sets), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(where, f"{name!r} is not a topic set (sets: {', '.join(sets)}){hint}")
    return name


def _no_unknown_keys(where: str, spec: Mapping[Any, Any], known: tuple[str, ...]) -> None:
    for key in spec:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{where}.{key}", f"unknown key{hint}")


def route_data(route: Route) -> dict[str, Any]:
    """A route as configuration data (what ``parse_routes`` reads)."""
    data: dict[str, Any] = {"queues": list(route.patterns), "set": route.set}
    if route.draining is not None:
        data["draining"] = route.draining
    return data
