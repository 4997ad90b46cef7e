"""The redelivery room: the tracker, a separately deployed process (``kmq-redelivery-tracker``, ``kmq tracker``,
``python -m kmq.redelivery``) that redelivers the messages whose worker went silent.

- ``tracker``: RedeliveryTracker, the loop over the markers partitions it owns;
- ``partition_state``: one markers partition's in-flight messages and their deadlines (pure);
- ``clock`` and ``clock_probe``: each partition's deadline clock on broker time;
- ``redeliverer``: copy → End for each expired message, retried, never dropped;
- ``copy_log``, ``metrics``, ``cli``.
"""

from kmq.redelivery.tracker import RedeliveryTracker

__all__ = ["RedeliveryTracker"]
