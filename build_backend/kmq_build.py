"""kmq's PEP 517 build backend: setuptools', plus what compiling the consumer's hot path needs when asked for.

``KMQ_COMPILE=1`` asks setup.py to compile its ``HOT_PATH`` with mypyc (``make compiled``, ``make dist``, or
``KMQ_COMPILE=1 pip install kmq-*.tar.gz``). Only then does a build need mypy (which brings mypyc) and the packages
mypy reads when it type-checks what those modules import, as ``make lint`` does. A plain ``pip install`` or
``pip install -e`` gets neither: it builds pure Python in seconds (black's opt-in mypyc build, with setuptools).
"""

from __future__ import annotations

import os

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 - the rest of PEP 517's interface, as setuptools has it

#: [project] dependencies, the dev extra's types-*, and opentelemetry-api (kmq.otel's imports, made when tracing).
COMPILE_REQUIRES = [
    "mypy>=1.11", "confluent-kafka>=2.13", "protobuf>=7.35.1,<8", "structlog>=24.1", "prometheus-client>=0.20",
    "pyyaml>=6.0", "croniter>=6.0", "tzdata>=2024.1", "types-protobuf>=5.28", "types-PyYAML>=6.0",
    "types-croniter>=6.0", "opentelemetry-api>=1.27",
]


def _compile_requires() -> list[str]:
    return list(COMPILE_REQUIRES) if os.environ.get("KMQ_COMPILE") == "1" else []


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    return [*build_meta.get_requires_for_build_wheel(config_settings), *_compile_requires()]


def get_requires_for_build_editable(config_settings: dict[str, object] | None = None) -> list[str]:
    return [*build_meta.get_requires_for_build_editable(config_settings), *_compile_requires()]
