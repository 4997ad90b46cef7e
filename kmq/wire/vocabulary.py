"""One vocabulary of message states and counters, spelled once and spoken by every tool: the worker's summary,
``kmq stats``, ``kmq dlq``, ``kmq inspect`` and the Spark audit (README: "States and counters").

A *message* is everything one ``send`` produced: the original record and every copy the tracker or a redrive made
of it, folded together by the first delivery's id. At any moment a message is in exactly one **state**; the
**counters** count events in its life.
"""

from __future__ import annotations

# --- states: where a message is now (exactly one) ----------------------------------------------------------------

#: On the messages topic, not yet read by its queue's consumers (past the group's committed offset).
WAITING = "waiting"
#: Read before its due time (``send(delay=…)``): the tracker brings it back then. Not in flight, not a delivery.
DELAYED = "delayed"
#: Started: buffered at a consumer or held by a handler, its deadline ahead (kept alive).
IN_FLIGHT = "in_flight"
#: Ended by an ack: done, never delivered again.
ACKED = "acked"
#: On the dead-letter topic: refused by a handler (``reject``, ``kmq.Reject``) or past ``max_deliveries``.
DEAD_LETTERED = "dead_lettered"
#: Read after its time to live: never handed to a handler (dead-lettered with reason ``expired``, or dropped).
EXPIRED = "expired"
#: Settled by ``kmq purge`` without (another) handler run.
PURGED = "purged"
#: The audit's verdict on a message no state explains: an open delivery past its deadline that no tracker brought
#: back, or a copy that vanished. Never expected; the audit is the oracle for "nothing lost".
LOST = "lost"

#: Settled for good: a message in one of these states is never handed out again.
FINAL_STATES = (ACKED, DEAD_LETTERED, EXPIRED, PURGED)
STATES = (WAITING, DELAYED, IN_FLIGHT, *FINAL_STATES, LOST)

# --- counters: events in a message's life --------------------------------------------------------------------------

#: Hand-outs to a handler: each run a handler started on it. A delay hop, a give-back, an expiry and a purge at read
#: time are not deliveries.
DELIVERED = "delivered"
#: A handler gave it back to be tried again (``release``, or the worker after an exception or a time limit).
RELEASED = "released"
#: Given back unprocessed (``give_back``, a closing consumer, a stopping worker): redelivered at once, and not
#: counted as a delivery.
RETURNED = "returned"
#: Copies the tracker made because a deadline passed (after a release, or a worker gone silent): each is a new
#: record on the messages topic that folds into the same message.
REDELIVERED = "redelivered"
#: Of the dead-lettered: refused by a handler. The others hit ``max_deliveries`` (at a worker or at the tracker).
REJECTED = "rejected"

COUNTERS = (DELIVERED, RELEASED, RETURNED, REDELIVERED, REJECTED)
