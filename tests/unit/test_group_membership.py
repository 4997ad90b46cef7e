"""GroupMembership (kmq._kafka.group) when its owner replaces the group client: the old client's late callbacks
are not followed, and whatever it revokes or loses is still handed back."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from kmq._kafka.group import GroupMembership


class Client:
    """A group client that records its subscription's callbacks and the (un)assign calls made on it."""

    def __init__(self) -> None:
        self.callbacks: dict[str, Any] = {}
        self.calls: list[tuple[str, list[int]]] = []

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def fire(self, kind: str, partitions: list[int]) -> None:
        self.callbacks[f"on_{kind}"](self, [TopicPartition("t", p) for p in partitions])

    def incremental_assign(self, partitions: list[Any]) -> None:
        self.calls.append(("assign", [tp.partition for tp in partitions]))

    def incremental_unassign(self, partitions: list[Any]) -> None:
        self.calls.append(("unassign", [tp.partition for tp in partitions]))

    def assign(self, partitions: list[Any]) -> None:
        raise AssertionError("cooperative")

    def unassign(self) -> None:
        raise AssertionError("cooperative")


def test_the_callbacks_of_a_replaced_client_are_not_followed_but_what_it_loses_is_handed_back() -> None:
    seen: list[tuple[str, list[int]]] = []
    membership = GroupMembership("g", "cooperative-sticky", eager=False, join_bound_s=10,
                                 on_assigned=lambda p: seen.append(("assigned", p)),
                                 on_dropped=lambda p, lost: seen.append(("dropped", p)))
    old, new = Client(), Client()
    membership.subscribe(old, ["t"])
    old.fire("assign", [0])
    membership.subscribe(new, ["t"])
    old.fire("assign", [1])
    old.fire("lost", [0])
    new.fire("assign", [0, 1])
    assert membership.assigned == {0, 1}
    assert seen == [("assigned", [0]), ("assigned", [0, 1])]
    assert old.calls == [("assign", [0]), ("unassign", [0])]
    assert new.calls == [("assign", [0, 1])]
