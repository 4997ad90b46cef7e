"""Message groups on the consumer side (docs/concepts/groups.md): the owner of a messages-topic partition hands out
each group's messages in order and one at a time, redelivers them in place, and commits at the lowest unfinished
record.

In the order data flows: ``ledger`` (per partition, what was read from the committed offset on, with a FIFO per
group) → ``ready_ring`` (the groups whose next message may go out, taken from in turn: fair dispatch) → ``dispatch``
(the consumer loop's side: Starts, hand-out, settles, commits) ; ``inheritance`` folds the markers a new owner
replays (what an earlier owner held or finished), ``follower`` reads them, ``marker_floor`` says from where.
"""
