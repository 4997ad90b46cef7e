"""Consumer: reads one logical queue and hands out its messages (see ``consumer.py`` for the data path).

The facade (``consumer``) over its parts, in the order data flows through them: ``intake`` (records fetched, flow
control) → ``start_pipeline`` (records → Messages → Start batch → commit → hand-out) with ``offset_book`` (what may
be committed) and ``marker_writer`` (Starts and settles as marker records) → ``hand_out`` (the ready buffer
receives take from, and the back-pressure on Starting more) → ``in_flight`` (messages until settled,
keep-alives); ``due_times`` holds messages until their delivery time.
"""

from kmq.client.consumer.consumer import Consumer

__all__ = ["Consumer"]
