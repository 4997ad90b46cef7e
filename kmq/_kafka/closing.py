"""close_within: a Kafka client's close, bounded in time.

librdkafka's close (leave the group, final fetch-state cleanup) may wait long with the broker down or its coordinator
unanswering: it gets a thread and a bound; past that the caller goes on, and the process's exit ends the client.
"""

from __future__ import annotations

import threading
from typing import Protocol

import structlog

#: How long a member replacing its group consumer (it is out of its group) waits for the old one to leave before it
#: goes on without it.
OLD_CLIENT_CLOSE_S = 10.0


class Closable(Protocol):
    def close(self) -> None: ...


def close_within(client: Closable, timeout_s: float, logger: structlog.typing.FilteringBoundLogger,
                 *, what: str = "consumer") -> bool:
    """Closes ``client`` on a thread of its own, waiting up to ``timeout_s``; False (and one warning) if it has not
    closed by then. A failing close is logged, not raised: nothing is left to save."""

    def close() -> None:
        try:
            client.close()
        except Exception as err:  # noqa: BLE001 - see the docstring
            logger.warning(f"{what}_close_failed", error=f"{type(err).__name__}: {err}")

    closer = threading.Thread(target=close, name=f"kmq-{what}-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        logger.warning(f"{what}_close_timeout", timeout_s=round(timeout_s, 1), detail="left to close in the background")
        return False
    return True
