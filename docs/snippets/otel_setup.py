"""Traces across the queue: configure OpenTelemetry once; kmq's producer, consumer and worker do the rest."""

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from kmq import Config, Service, otel

provider = TracerProvider()  # in production: BatchSpanProcessor(OTLPSpanExporter()), or `opentelemetry-instrument`
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(provider)

config = Config.load()
emails = Service(config).queue("emails")
tracer = trace.get_tracer("shop")

with tracer.start_as_current_span("checkout"), emails.producer() as producer:
    producer.send(b'{"to": "ada@example.com"}')  # a "send emails" span; its context goes in the traceparent header

with emails.consumer() as consumer:
    message = consumer.receive(timeout=60)
    assert message is not None, "no message within 60 s"
    with otel.process_span(message, config.message_topic):  # what a worker does around every handler run
        print("sending email to", message.payload.decode())  # your own spans here are children of "process emails"
        message.ack()  # recorded as an "ack" event of the process span
