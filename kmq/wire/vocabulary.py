"""One vocabulary of message states and counters, spelled once and spoken by every tool: the worker's summary,
``kmq stats``, ``kmq dlq``, ``kmq inspect`` and the Spark audit (docs/concepts/states.md renders this module).

A *message* is everything one ``send`` produced: the original record and every copy the tracker or a redrive made
of it, folded together by the first delivery's id. A *delivery* is one record of it that a consumer Started.

At any moment a message is in exactly one **state**, the first of ``STATE_RULES`` whose facts hold (each fact a
count over the message's deliveries and records, defined at ``FACTS``); the **counters** count events in its life.
``kmq stats`` (kmq.ops.lifecycle, in Python) and ``kmq audit`` (kmq.ops.audit.classification, in Spark) compute the
same facts from the same topics and apply this one table; a property test holds them to it.

Every marker is read as one ``MarkerEvent`` (``marker_event``), so both tools tell a release from a give-back, a
handler's refusal from a dead letter after ``max_deliveries``, and a consumer's purge from a tracker's the same way.
"""

from __future__ import annotations

import re
from enum import IntEnum

from kmq.wire.conventions import (
    DELAY_REASON,
    EXPIRED_REASON,
    PURGED_REASON,
    RELEASE_REASON,
    RETURN_REASON,
    is_deduplicated,
)
from kmq.wire.markers import EndReason, Marker, MarkerType

# --- states: where a message is now (exactly one) ----------------------------------------------------------------

#: Ended by an ack: done. A copy still on its way (a late ack racing the tracker) does not undo it.
ACKED = "acked"
#: Started and not settled, its deadline ahead: buffered at a consumer, held by a handler, or released and waiting
#: out its retry delay at the tracker.
IN_FLIGHT = "in_flight"
#: Read before its due time (``send(delay=…)``): the tracker brings it back then. Not a delivery.
DELAYED = "delayed"
#: Started and not settled, past its deadline: a tracker should have brought it back. Lasting overdue messages mean
#: no tracker runs; the audit counts them as lost.
OVERDUE = "overdue"
#: Its newest record is on the messages topic at or past its queue's committed offset: no consumer has read it.
WAITING = "waiting"
#: Settled by ``kmq purge`` without (another) handler run: ended by a consumer or a tracker, or still on the topic
#: but enqueued before the queue's purge time (the next consumer to read it settles it so).
PURGED = "purged"
#: Read after its time to live: never handed to a handler (dead-lettered with reason ``expired``, or dropped).
EXPIRED = "expired"
#: A duplicate send: a record with the same dedup key reached its partition less than ``dedup_window_ms`` before it
#: (docs/concepts/dedup.md). Ended without a Start, never handed to a handler; ``kmq inspect`` names the message it
#: repeats.
DEDUPLICATED = "deduplicated"
#: On the dead-letter topic: refused by a handler (``reject``, ``kmq.Reject``; each refusal is a ``rejected`` event
#: too), or dead-lettered after ``max_deliveries`` (by a worker or a tracker).
DEAD_LETTERED = "dead_lettered"
#: Read by an at-most-once queue's consumer, which writes no markers: handed out once (or expired or purged without
#: a trace). What its handler did, only the handler knows.
CONSUMED = "consumed"
#: Ended by a kafka-mq-go component with a bare End that no copy follows: a Go consumer's ack, or a Go tracker's
#: redelivery whose copy is not read yet. Never counted as an ack.
ENDED_BY_GO = "ended_by_go"
#: None of the above: its last delivery was redelivered but no copy exists, or a record of a queue that writes
#: markers was committed past without a Start. Never expected; the audit counts it as lost.
VANISHED = "vanished"

STATES = (ACKED, IN_FLIGHT, DELAYED, OVERDUE, WAITING, PURGED, EXPIRED, DEDUPLICATED, DEAD_LETTERED, CONSUMED,
          ENDED_BY_GO, VANISHED)
#: Settled for good: a message in one of these states is never handed out again (unless a redrive puts it back).
FINAL_STATES = (ACKED, PURGED, EXPIRED, DEDUPLICATED, DEAD_LETTERED, CONSUMED, ENDED_BY_GO)
#: The audit's verdict: ``lost`` = overdue + vanished messages. Nothing else is ever lost.
LOST = "lost"
LOST_STATES = (OVERDUE, VANISHED)

# --- facts: counts over one message's deliveries and records, from which its state follows ----------------------

FACTS = {
    "acks": "ACK markers of its deliveries (a late ack of a redelivered delivery included)",
    "open_in_flight": "deliveries with no End whose deadline (the last Start or KeepAlive's) is not before now, "
                      "and that were not delayed",
    "open_delayed": "deliveries with no End and a delay hop whose deadline (the due time) is not before now",
    "open_overdue": "deliveries with no End whose deadline is before now",
    "waiting_records": "records of it that no consumer Started, at or past the queue's committed offset, "
                       "enqueued at or after the queue's purge time",
    "purged_records": "records of it that no consumer Started, at or past the queue's committed offset, "
                      "enqueued before the queue's purge time",
    "purge_ends": "PURGE and TRACKER_PURGE markers of its deliveries (†)",
    "expire_ends": "EXPIRE markers of its deliveries (†)",
    "expired_letters": "its dead letters with reason `expired` (†)",
    "dedup_ends": "DEDUPLICATE markers of its records (a duplicate send's End, written instead of a Start)",
    "dead_ends": "REJECT and DEAD_LETTER markers of its deliveries (†)",
    "dead_letters": "its other dead letters (†)",
    "consumed_records": "records of it that no consumer Started, before an at-most-once queue's committed offset",
    "go_ends": "GO_END markers of its deliveries that no copy follows",
}

#: (†) Facts of an ending that a later delivery undoes: each counts only while the newest of its markers or letters
#: is not older than the message's last Start (the latest first Start of its deliveries). A dead letter that a
#: redrive put back, and whose copy a consumer Started, is behind the message: what its copy did since decides.
UNDONE_BY_A_LATER_START = ("purge_ends", "expire_ends", "expired_letters", "dead_ends", "dead_letters")

#: A message is in the first state whose facts (any of them) are non-zero; else it has ``VANISHED``.
STATE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (ACKED, ("acks",)),
    (IN_FLIGHT, ("open_in_flight",)),
    (DELAYED, ("open_delayed",)),
    (OVERDUE, ("open_overdue",)),
    (WAITING, ("waiting_records",)),
    (PURGED, ("purged_records", "purge_ends")),
    (EXPIRED, ("expire_ends", "expired_letters")),
    (DEDUPLICATED, ("dedup_ends",)),
    (DEAD_LETTERED, ("dead_ends", "dead_letters")),
    (CONSUMED, ("consumed_records",)),
    (ENDED_BY_GO, ("go_ends",)),
)


def state_of(facts: dict[str, int]) -> str:
    """The state ``STATE_RULES`` gives a message with these facts (missing facts are 0)."""
    for state, names in STATE_RULES:
        if any(facts.get(name, 0) > 0 for name in names):
            return state
    return VANISHED


# --- counters: events in a message's life, summed per queue ---------------------------------------------------------

#: Messages whose original record was read (a copy alone, or a message enqueued before an audit's window, is not).
PRODUCED = "produced"
#: Hand-outs to a handler: deliveries, less those no handler can have had (given back, a delay hop, expired at
#: read, purged by a consumer). A delivery whose worker went silent counts: its handler may have run.
DELIVERED = "delivered"
#: A handler gave it back to be tried again (``release``, or the worker after an exception or a time limit).
RELEASED = "released"
#: Given back unprocessed (``give_back``, a closing consumer, a stopping worker): copied at once, not a delivery.
RETURNED = "returned"
#: Copies a tracker made because a deadline passed after a release or a silent worker (not after a give-back or a
#: delay hop): each is a new record on the messages topic that folds into the same message.
REDELIVERED = "redelivered"
#: Of ``redelivered``: deliveries nobody settled (a worker crashed or went silent) that a tracker took back.
RECOVERED = "recovered"
#: Of ``redelivered``: copies a kafka-mq-go tracker made (linked to their original by queue and payload).
GO_REDELIVERED = "go_redelivered"
#: Refusals by a handler (``reject``, ``kmq.Reject``): an event each, also when a redrive has since brought the
#: message back (``dead_lettered`` is the state now: a redriven message is no longer in it).
REJECTED = "rejected"

COUNTERS = (PRODUCED, DELIVERED, RELEASED, RETURNED, REDELIVERED, RECOVERED, GO_REDELIVERED, REJECTED)

# --- duplicates: what idempotency has to cover (the audit's figures) ------------------------------------------------

#: Messages a handler was started on more than once (``delivered`` > 1; retries included): a failed or timed-out run
#: may have done part of its work.
DELIVERED_MORE_THAN_ONCE = "delivered_more_than_once"
#: Messages acked more than once (a worker's late ack racing the tracker's copy): side effects happened twice.
ACKED_MORE_THAN_ONCE = "acked_more_than_once"
#: Acks beyond each message's first.
DUPLICATE_ACKS = "duplicate_acks"
DUPLICATES = (DELIVERED_MORE_THAN_ONCE, ACKED_MORE_THAN_ONCE, DUPLICATE_ACKS)


# --- what one marker means ------------------------------------------------------------------------------------------


class MarkerEvent(IntEnum):
    """What one marker says happened to its delivery (stable codes: the audit stores them)."""

    START = 0
    KEEPALIVE = 1
    #: KeepAlive with reason ``released``: a handler gave it back.
    RELEASE = 2
    #: KeepAlive with reason ``returned``: given back before any handler had it.
    RETURN = 3
    #: KeepAlive with reason ``delayed``: read before its due time.
    DELAY = 4
    #: End ACKED written by a kmq consumer (it carries its writer's id).
    ACK = 5
    #: End with no reason and no writer: kafka-mq-go's (a Go consumer's ack, or a Go tracker's redelivery).
    GO_END = 6
    #: End REJECTED with a handler's reason: refused, dead-lettered.
    REJECT = 7
    #: Dead-lettered after ``max_deliveries``: a worker's End REJECTED with its "failed N time(s)" reason, or a
    #: tracker's End DEAD_LETTERED.
    DEAD_LETTER = 8
    #: End REJECTED with reason ``expired``: read after its time to live, never handed out.
    EXPIRE = 9
    #: End REJECTED with reason ``purged`` written by a consumer: settled before (another) handler run.
    PURGE = 10
    #: The same, written by a tracker (it Ended a purged message instead of copying it).
    TRACKER_PURGE = 11
    #: End REDELIVERED: a tracker copied it to the messages topic.
    REDELIVER = 12
    #: End REJECTED with reason ``deduplicated…``: a duplicate send, Ended instead of Started.
    DEDUPLICATE = 13


#: Markers that end a delivery.
END_EVENTS = frozenset({MarkerEvent.ACK, MarkerEvent.GO_END, MarkerEvent.REJECT, MarkerEvent.DEAD_LETTER,
                        MarkerEvent.EXPIRE, MarkerEvent.PURGE, MarkerEvent.TRACKER_PURGE, MarkerEvent.REDELIVER,
                        MarkerEvent.DEDUPLICATE})
#: Ends that settle a message for good, unless a redrive puts it back (the facts marked † above).
FINAL_END_EVENTS = frozenset({MarkerEvent.REJECT, MarkerEvent.DEAD_LETTER, MarkerEvent.EXPIRE, MarkerEvent.PURGE,
                              MarkerEvent.TRACKER_PURGE})
#: A delivery with one of these reached no handler: it is not counted as delivered.
UNHANDLED_EVENTS = frozenset({MarkerEvent.RETURN, MarkerEvent.DELAY, MarkerEvent.EXPIRE, MarkerEvent.PURGE,
                              MarkerEvent.DEDUPLICATE})
#: A delivery with one of these was no hand-out to retry, so its copy is not a redelivery.
UNCOUNTED_COPY_EVENTS = frozenset({MarkerEvent.RETURN, MarkerEvent.DELAY})

_KEEPALIVE_EVENTS = {RELEASE_REASON: MarkerEvent.RELEASE, RETURN_REASON: MarkerEvent.RETURN,
                     DELAY_REASON: MarkerEvent.DELAY}
#: The dead-letter reasons of ``max_deliveries``: the worker's ("failed 3 time(s), last: …") and the tracker's
#: ("max deliveries (3) reached").
MAX_DELIVERIES_PATTERN = r"^(failed \d+ time\(s\)|max deliveries \(\d+\) reached)"
_MAX_DELIVERIES = re.compile(MAX_DELIVERIES_PATTERN)


def written_by_tracker(client_id: str, instance_id: str) -> bool:
    """A tracker's End names the tracker (its client id) but no consumer instance; a consumer's carries its
    instance id (kmq format) or neither (kafka-mq-go format)."""
    return bool(client_id) and not instance_id


def dead_letter_event(reason: str) -> MarkerEvent:
    """What a dead-letter (or REJECTED End) reason says: expired, purged, deduplicated, after max deliveries, or
    refused."""
    if reason == EXPIRED_REASON:
        return MarkerEvent.EXPIRE
    if is_deduplicated(reason):
        return MarkerEvent.DEDUPLICATE
    if reason == PURGED_REASON:
        return MarkerEvent.PURGE
    if _MAX_DELIVERIES.match(reason):
        return MarkerEvent.DEAD_LETTER
    return MarkerEvent.REJECT


def marker_event(marker: Marker) -> MarkerEvent:
    """What ``marker`` says happened: the one reading of a marker that ``kmq stats`` and the audit share."""
    return event_of(marker.type, marker.end_reason, marker.reason, marker.client_id, marker.instance_id)


def event_of(kind: int, end_reason: int, reason: str, client_id: str, instance_id: str) -> MarkerEvent:
    """``marker_event`` from a marker's fields (type, end reason, reason, writer ids); an end reason this version
    does not know reads as ACKED, as the codec decodes it."""
    if kind == MarkerType.START:
        return MarkerEvent.START
    if kind == MarkerType.KEEPALIVE:
        return _KEEPALIVE_EVENTS.get(reason, MarkerEvent.KEEPALIVE)
    if end_reason == EndReason.REDELIVERED:
        return MarkerEvent.REDELIVER
    if end_reason == EndReason.DEAD_LETTERED:
        return MarkerEvent.DEAD_LETTER
    if end_reason != EndReason.REJECTED:
        return MarkerEvent.ACK if client_id or instance_id else MarkerEvent.GO_END
    event = dead_letter_event(reason)
    if event is MarkerEvent.PURGE and written_by_tracker(client_id, instance_id):
        return MarkerEvent.TRACKER_PURGE
    return event
