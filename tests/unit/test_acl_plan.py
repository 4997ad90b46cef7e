"""kmq acl plan's pure part (kmq.ops.acl): the least-privilege prefixed ACLs of a tenant's topic set."""

from __future__ import annotations

import pytest

from kmq.config import Config
from kmq.errors import ConfigError
from kmq.ops.acl import GROUP, NEEDS, OPERATOR, PRODUCER, ROLES, TOPIC, TRACKER, WORKER, plan

CONFIG = Config(bootstrap_servers="x:1", topic_sets={"tenant-a": {}, "tenant-b": {"prefix": "acme.b"}})


def test_a_tenant_gets_prefixed_acls_on_its_own_prefix_and_nothing_else() -> None:
    entries = plan(CONFIG.topic_set("tenant-a"), "User:tenant-a")
    assert {(e.resource_type, e.pattern_type, e.name, e.host, e.principal) for e in entries} == {
        (TOPIC, "PREFIXED", "kmq.tenant-a.", "*", "User:tenant-a"),
        (GROUP, "PREFIXED", "kmq.tenant-a.", "*", "User:tenant-a")}
    assert [(e.resource_type, e.operation) for e in entries] == [
        (TOPIC, "CREATE"), (TOPIC, "DESCRIBE_CONFIGS"), (TOPIC, "READ"), (TOPIC, "WRITE"), (GROUP, "READ")]
    # no cluster right, no wildcard, no transactional id: idempotent producers need only WRITE on a topic (KIP-679)
    assert not [e for e in entries if e.resource_type not in (TOPIC, GROUP) or e.name in ("*", "")]


def test_each_role_gets_only_what_it_needs() -> None:
    a = CONFIG.topic_set("tenant-a")
    producer = plan(a, "User:p", (PRODUCER,))
    assert [(e.resource_type, e.operation) for e in producer] == [(TOPIC, "DESCRIBE_CONFIGS"), (TOPIC, "WRITE")]
    for role in (WORKER, TRACKER):
        assert {(e.resource_type, e.operation) for e in plan(a, "User:w", (role,))} == {
            (TOPIC, "READ"), (TOPIC, "WRITE"), (TOPIC, "DESCRIBE_CONFIGS"), (GROUP, "READ")}
    assert ("TOPIC", "CREATE") in {(e.resource_type, e.operation) for e in plan(a, "User:o", (OPERATOR,))}
    both = plan(a, "User:x", (TRACKER, PRODUCER))
    assert next(e for e in both if e.operation == "WRITE").roles == (PRODUCER, TRACKER)  # in ROLES' order


def test_every_need_says_why() -> None:
    assert set(NEEDS) == set(ROLES)
    assert all(why for needs in NEEDS.values() for _type, _op, why in needs)


@pytest.mark.parametrize(("topics", "principal", "roles", "says"), [
    ("default", "User:x", ROLES, "default set shares no prefix"),
    ("tenant-a", "User:x", ("admin",), "'admin' is not a role"),
    ("tenant-a", "tenant-a", ROLES, "must be TYPE:NAME"),
])
def test_a_plan_that_cannot_isolate_is_refused_in_one_line(topics: str, principal: str, roles: tuple[str, ...],
                                                           says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        plan(CONFIG.topic_set(topics), principal, roles)
