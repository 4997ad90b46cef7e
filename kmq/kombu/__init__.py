"""kmq as a kombu transport, so Celery (and any kombu user) runs on kmq queues.

``import kmq.kombu`` registers the ``kmq://`` URL scheme; without the import, name the class:
``broker_transport = "kmq.kombu:Transport"`` (Celery) or ``Connection(url, transport="kmq.kombu:Transport")``.
Needs the ``kmq[celery]`` extra (kombu, celery).
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

from kmq.kombu.channel import Channel
from kmq.kombu.settings import TransportOptions
from kmq.kombu.transport import Transport

#: The URL scheme: ``kmq://host:9092,host2:9092``.
SCHEME = "kmq"
TRANSPORT_ALIASES.setdefault(SCHEME, "kmq.kombu:Transport")

__all__ = ["SCHEME", "Channel", "Transport", "TransportOptions"]
