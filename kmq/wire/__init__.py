"""kmq's wire format: what another process reads back. No Kafka imports.

- ``conventions``: message ids, queue names, header names, marker reasons, group names, time conversions (spelled
  once, and re-exported here: ``from kmq import wire; wire.HEADER_FIRST_ID``);
- ``markers``: kafka-mq-go's one-record-per-marker protobuf codec (byte-compatible);
- ``marker_batch``: kmq's batched marker records;
- ``control``: the control topic's pause and purge records.
"""

from kmq.wire.conventions import *  # noqa: F403 - the conventions are this package's namespace
from kmq.wire.conventions import __all__ as __all__
