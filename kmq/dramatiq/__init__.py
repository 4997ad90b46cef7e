"""kmq for Dramatiq: a broker whose queues are kmq queues (extra ``kmq[dramatiq]``).

    import dramatiq
    from kmq.dramatiq import KmqBroker

    dramatiq.set_broker(KmqBroker(url="kmq://127.0.0.1:9092"))

Retries go through kmq's delayed sends, failed messages to kmq's dead-letter topic, and a redelivery tracker
(``kmq tracker``) hands the messages of a worker that died to the others.
"""

from kmq.dramatiq.broker import KmqBroker
from kmq.dramatiq.consumer import KmqConsumer, KmqMessageProxy
from kmq.dramatiq.url import parse_url

__all__ = ["KmqBroker", "KmqConsumer", "KmqMessageProxy", "parse_url"]
