"""Message groups: each account's jobs run in the order they were sent and one at a time; accounts run in parallel."""

from kmq import Config, Service

invoices = Service(Config.load()).queue("invoices")

with invoices.producer() as producer:
    for n in range(3):
        for account in ("account-7", "account-9"):
            producer.send(f"invoice {n}".encode(), group=account)  # one partition per group: its order is kept

with invoices.consumer() as consumer:
    seen: dict[str, list[str]] = {}
    while sum(map(len, seen.values())) < 6:
        message = consumer.receive(timeout=30)
        assert message is not None, "the jobs did not come"
        # Until this message is settled, no other message of its group is handed out (group_concurrency: 1).
        seen.setdefault(message.group or "", []).append(message.payload.decode())
        message.ack()  # the group's next message goes out once this ack is durable
    for account, jobs in sorted(seen.items()):
        print(account, jobs)  # account-7 ['invoice 0', 'invoice 1', 'invoice 2'], and the same for account-9
