"""ClientIdentity: a stable ``client_id`` is held by one live process at a time.

A ``client_id`` is the consumer's static group membership (``group.instance.id``) and the name under which the
tracker frees at once what an earlier instance held (fast takeover). Two live processes with one ``client_id`` would
fence each other in the group, and the second one's "hello" would make the tracker redeliver what the first is still
running: the job would run twice at once. So a consumer with a ``client_id`` first **claims** it on the control
topic and waits briefly; an instance that already holds the id and is alive follows the control topic and
**answers** a claim written after its own, and the claimer then refuses to start (ClientIdInUseError). A crashed
predecessor cannot answer: its successor starts after the wait and takes its messages over. The control topic's
single partition orders claims, so of two instances started together the first to claim keeps the id.
"""

from __future__ import annotations

import threading
import time

import structlog

from kmq._kafka.factory import ControlClient, ProducerClient
from kmq.errors import ClientIdInUseError, KmqError
from kmq.wire.control import ALIVE, CLAIM, ControlState, identity_record

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How long a claimer waits for a live holder's answer (it arrives within two control-topic polls, ~0.4 s).
ANSWER_WAIT_S = 2.0


class ClientIdentity:
    """Claims ``client_id`` for this instance (``claim``, at start) and defends it (``on_control``, on the control
    follower's thread)."""

    def __init__(self, client_id: str, instance_id: str, producer: ProducerClient, control: ControlClient,
                 write_timeout_s: float, answer_wait_s: float = ANSWER_WAIT_S) -> None:
        self._client_id = client_id
        self._instance_id = instance_id
        self._producer = producer
        self._control = control
        self._write_timeout_s = write_timeout_s
        self._answer_wait_s = answer_wait_s
        #: Where our claim sits on the control topic; None until claimed (or without a control topic).
        self._claim_offset: int | None = None
        self._answered: set[int] = set()
        self._lock = threading.Lock()

    def claim(self) -> None:
        """Writes the claim and waits for a live holder's answer; raises ClientIdInUseError if one answers."""
        if not self._control.available:
            log.warning("client_id_unguarded", client_id=self._client_id,
                        note="no control topic: a second process with this client_id would not be refused")
            return
        key, value = identity_record(CLAIM + self._client_id, self._instance_id)
        try:
            written = self._producer.produce_future(self._control.topic, value, key).result(self._write_timeout_s)
        except (KmqError, TimeoutError) as err:
            raise KmqError(f"cannot claim client_id {self._client_id!r} on {self._control.topic!r}: {err}") from err
        with self._lock:
            self._claim_offset = written.offset
        deadline = time.monotonic() + self._answer_wait_s
        while time.monotonic() < deadline:
            holder = self._live_holder(self._control.state, written.offset)
            if holder is not None:
                raise ClientIdInUseError(
                    f"client_id {self._client_id!r} is in use by a live consumer ({holder}): every worker process "
                    "needs a client_id of its own (KMQ_CLIENT_ID), or none")
            time.sleep(0.05)

    def _live_holder(self, state: ControlState, claim_offset: int) -> str | None:
        answer = state.alive.get(self._client_id)
        if answer is not None and answer.claim_offset == claim_offset and answer.instance_id != self._instance_id:
            return answer.instance_id
        return None

    def on_control(self, state: ControlState) -> None:
        """On the control follower's thread: answers a claim of our client_id by another instance, written after
        ours (ours came first: we hold it)."""
        claim = state.claims.get(self._client_id)
        with self._lock:
            if (claim is None or claim.instance_id == self._instance_id or self._claim_offset is None
                    or claim.offset <= self._claim_offset or claim.offset in self._answered):
                return
            self._answered.add(claim.offset)
        key, value = identity_record(ALIVE + self._client_id, self._instance_id, claim.offset)
        log.warning("client_id_claim_refused", client_id=self._client_id, claimed_by=claim.instance_id)
        try:
            self._producer.produce(self._control.topic, value, key)
        except KmqError as err:  # the claimer then starts and fences us: say why
            log.error("client_id_not_defended", client_id=self._client_id, error=str(err))
