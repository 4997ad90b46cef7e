"""The client room: what an application uses to put messages on a queue and take them off.

- ``producer``: Producer (send, send_async with delays, TTLs and time limits);
- ``message``: Message, one delivery and the handle to settle it (ack, release, reject, give_back, keep_alive);
- ``consumer``: Consumer, a facade over its named parts (intake, Start pipeline, offset book, marker writer,
  in-flight table, due times).
"""

from kmq.client.consumer import Consumer
from kmq.client.message import Message
from kmq.client.producer import Producer

__all__ = ["Consumer", "Message", "Producer"]
