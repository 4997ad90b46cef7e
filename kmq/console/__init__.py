"""kmq console (extra ``kmq[console]``): a web console for queues, messages, dead letters, workers and trackers.

It follows the topics of the topic sets it serves (``--set``; default every set of the config) as a tracker does
(kmq.console.follower, over kmq.ops.live's incremental classification), so a page reads memory, not Kafka; several
replicas can run side by side, sharing nothing but Kafka. Viewing and
acting are separate roles; every action needs an operator login and a CSRF token, and is logged with who did it.
Start it with ``kmq-console`` or ``python -m kmq.console`` (kmq.console.command).
"""
