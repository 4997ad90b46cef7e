"""A Config in code: every field is checked when it is built (a bad value raises kmq.ConfigError naming it)."""

from kmq import Config, ConfigError

config = Config(
    bootstrap_servers="kafka1:9092,kafka2:9092",
    redelivery_timeout_ms=30_000,  # redelivered after 30 s without a keep-alive
    max_deliveries=5,  # dead letter after 5 deliveries (SQS maxReceiveCount)
    client_id="worker-1",  # stable identity: static membership and fast takeover after a restart
    queue_ttl_ms={"emails": 3_600_000},  # messages of "emails" expire after an hour unless sent with their own ttl
    kafka={"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
           "sasl.username": "kmq", "sasl.password": "secret"},  # passed to every client; never logged
)
print(config.dlq_topic, config.consumer_group("emails"), config.redacted_kafka()["sasl.password"])

try:
    Config(bootstrap_servers="kafka1:9092", redelivery_timeout_ms=0)
except ConfigError as err:
    print(err)  # one line naming the setting and what is wrong with it
