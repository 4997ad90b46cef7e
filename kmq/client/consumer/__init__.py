"""Consumer: reads one logical queue and hands out its messages (see ``consumer.py`` for the data path).

The facade (``consumer``) over its parts, in the order data flows through them: ``intake`` (records fetched, flow
control) → ``start_pipeline`` (records → Messages → Start batch → commit → hand-out) with ``offset_book`` (what may
be committed) and ``marker_writer`` (Starts and settles as marker records) → ``in_flight`` (messages until settled,
keep-alives) and ``due_times`` (messages held until their delivery time).
"""

from kmq.client.consumer.consumer import Consumer

__all__ = ["Consumer"]
