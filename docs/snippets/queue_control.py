"""Pause, resume and purge a queue from Python (the same as `kmq pause`, `kmq resume` and `kmq purge`)."""

from datetime import UTC, datetime, timedelta

from kmq import Config, Service

emails = Service(Config.load()).queue("emails")

emails.pause(until=datetime.now(UTC) + timedelta(minutes=10))  # consumers take no new messages for 10 minutes
emails.resume()  # ... or until resumed
with emails.producer() as producer:
    producer.send(b"stale job")
purged_before = emails.purge()  # settle, without a handler, everything enqueued until now
print("purged messages enqueued before", purged_before.isoformat())
