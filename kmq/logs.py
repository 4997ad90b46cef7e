"""Log set-up for kmq's entry points (CLI, tracker); the library itself only emits through structlog."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", json: bool = False) -> None:
    """key=value lines (or JSON) on stderr, at ``level``; librdkafka's own logs come through the same way."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s")
    renderer: structlog.typing.Processor = (structlog.processors.JSONRenderer() if json
                                            else structlog.processors.LogfmtRenderer(sort_keys=False))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
