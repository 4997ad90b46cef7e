"""The three-node cluster secured like the single broker: a tenant's credentials and ACLs work across replicated
topics (RF 3, the nodes replicating over their TLS listener), and another tenant's topics refuse it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from kmq import AuthorizationError, Config, Consumer, Producer
from kmq._kafka.acls import create_acls
from kmq._kafka.topics import create_topics
from kmq.ops.acl import plan
from kmq.testing.broker import BrokerError
from kmq.testing.cluster import LocalCluster
from tests.helpers import receive_n

SETS = {"tenant-a": {}, "tenant-b": {}}
ROUTES = [{"queues": "a.*", "set": "tenant-a"}, {"queues": "b.*", "set": "tenant-b"}]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    try:
        with LocalCluster(secure=True) as running:
            yield running
    except BrokerError as err:
        pytest.fail(str(err), pytrace=False)


def test_a_tenant_works_on_a_secured_cluster_and_nowhere_else(cluster: LocalCluster) -> None:
    assert cluster.security is not None
    password = secrets.token_urlsafe(16)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.admin_settings()})
    upsert = UserScramCredentialUpsertion("tenant-a", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    admin.alter_user_scram_credentials([upsert])["tenant-a"].result(30)
    root = Config(bootstrap_servers=cluster.bootstrap_servers, kafka=cluster.admin_settings(), topic_sets=SETS,
                  routes=ROUTES)
    for name in SETS:
        statuses = create_topics(root, root.topic_set(name))
        assert {s.replication for s in statuses} == {3}
    create_acls(root, plan(root.topic_set("tenant-a"), "User:tenant-a"))
    # Tenant A, on its own credentials: sends, receives and acks on its replicated topics
    a = root.replace(kafka=cluster.security.client_settings("tenant-a", password))
    with Producer(a, "a.jobs") as producer:
        producer.send(b"replicated")
    with Consumer(a, "a.jobs") as consumer:
        [msg] = receive_n(consumer, 1, timeout_s=60)
        assert msg.payload == b"replicated"
        msg.ack()
        assert consumer.flush(30) == 0
    # ...and B's queue refuses it, naming B's topic
    with pytest.raises(AuthorizationError, match=r"'kmq\.tenant-b\.messages': not authorized"), Consumer(a, "b.jobs"):
        pass
