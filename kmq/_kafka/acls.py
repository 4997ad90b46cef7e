"""ACLs through the admin API: create what a plan lists (kmq.ops.acl makes the plan)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kmq._kafka.errors import to_kmq_error
from kmq._kafka.settings import base_settings
from kmq.config import Config
from kmq.errors import KafkaClientError


class Acl(Protocol):
    """One ALLOW ACL (kmq.ops.acl.AclEntry has these)."""

    @property
    def principal(self) -> str: ...
    @property
    def resource_type(self) -> str: ...
    @property
    def pattern_type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def operation(self) -> str: ...
    @property
    def host(self) -> str: ...


def binding(acl: Acl) -> AclBinding:
    return AclBinding(ResourceType[acl.resource_type], acl.name, ResourcePatternType[acl.pattern_type],
                      acl.principal, acl.host, AclOperation[acl.operation], AclPermissionType.ALLOW)


def create_acls(config: Config, acls: Sequence[Acl]) -> int:
    """Creates every ACL (one that exists already is left as it is); returns how many were asked for. Needs a
    principal allowed to alter the cluster's ACLs (a super user, or ALTER on the cluster)."""
    timeout_s = config.connect_timeout_ms / 1000
    admin = AdminClient(base_settings(config, "kmq-acl-admin"))
    bindings = {binding(a): a for a in acls}
    futures = admin.create_acls(list(bindings), request_timeout=timeout_s)
    for acl_binding, future in futures.items():
        acl = bindings[acl_binding]
        try:
            future.result(timeout=timeout_s + 5)
        except KafkaException as exc:
            raise to_kmq_error(exc, f"cannot create ACL {acl.operation} on {acl.resource_type} {acl.name!r}* for "
                                    f"{acl.principal}") from exc
        except TimeoutError:
            raise KafkaClientError(f"cannot reach Kafka at {config.bootstrap_servers} within {timeout_s:.0f}s",
                                   retriable=True) from None
    return len(futures)
