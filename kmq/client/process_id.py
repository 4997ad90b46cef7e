"""A ``client_id`` per process from one template: ``client_id: "worker-{process}"`` in every process of a pool.

Processes started from one configuration (``dramatiq -p N``, several ``kmq worker`` units, a Kubernetes
deployment) would share a literal ``client_id``, and one of them refuses to start (``ClientIdInUseError``): each
consumer with ``{process}`` in its ``client_id`` takes the lowest index that no live process holds. A restarted pool
takes its dead predecessors' ids, and with them their static group membership and the tracker's fast takeover.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

import structlog

from kmq.config import Config
from kmq.errors import ClientIdInUseError, ConfigError

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: The placeholder a ``client_id`` template holds.
PROCESS_FIELD = "{process}"
#: More processes than this on one template is a mistake, not a pool.
MAX_PROCESSES = 1024

T = TypeVar("T")

_lock = threading.Lock()
#: This process's index for each template it resolved (the same for all its queues), and whose process it is.
_resolved: dict[str, int] = {}
_pid = [os.getpid()]


def with_process_id(config: Config, open_consumer: Callable[[Config], T]) -> T:
    """``open_consumer(config)``, with ``{process}`` in ``config.client_id`` replaced by this process's index: the
    one it took before (for another queue), or the lowest that no live process holds (a claim a live holder answers
    costs about half a second; an unanswered one, the claim's 2 s wait)."""
    template = config.client_id
    if PROCESS_FIELD not in template:
        return open_consumer(config)
    with _lock:
        if _pid[0] != os.getpid():  # a forked child: its parent's index is not its own
            _resolved.clear()
            _pid[0] = os.getpid()
        known = _resolved.get(template)
        for index in [known] if known is not None else range(MAX_PROCESSES):
            client_id = template.replace(PROCESS_FIELD, str(index))
            try:
                consumer = open_consumer(config.replace(client_id=client_id))
            except ClientIdInUseError:
                continue
            if known is None:
                _resolved[template] = index
                log.info("client_id_taken", client_id=client_id, template=template)
            return consumer
    raise ConfigError("client_id", f"{template!r}: every index up to {MAX_PROCESSES - 1} is held by a live process"
                      if known is None else f"{template!r}: this process's id is held by another live process")
