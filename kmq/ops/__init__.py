"""The operations room: tools that read the topics to tell what happened (no part of the data path).

- ``lifecycle``: the pure fold of marker records into per-queue message states and counters;
- ``stats``: ``kmq stats`` (waiting, in flight, delivered, acked … per queue);
- ``dlq``: ``kmq dlq list/redrive``; ``inspect``: ``kmq inspect``, one message's life;
- ``schedules``: ``kmq schedule``, recurring sends on the control topic (the tracker group fires them);
- ``audit``: ``kmq audit``, the Spark lifecycle audit (extra ``kmq[spark]``).
"""
