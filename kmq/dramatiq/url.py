"""``kmq://`` URLs: the one-string form of a kmq Config, for settings files that hold a broker URL.

``kmq://host:9092,host2:9092/?message_topic=app.messages&redelivery_timeout_ms=30000&kafka.security.protocol=SSL``:
the host list is ``bootstrap_servers``; each query key is a Config field, typed as its ``KMQ_<FIELD>`` environment
variable would be, with ``kafka.<key>`` / ``consumer_kafka.<key>`` / ``producer_kafka.<key>`` for librdkafka
settings. ``queue_prefix`` is the broker's own option, not a Config field. Unknown keys are errors, as in a YAML file.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from kmq import Config, ConfigError
from kmq.config import KAFKA_MAPPINGS

SCHEME = "kmq"
#: Broker options a URL may carry besides the Config's fields.
BROKER_KEYS = ("queue_prefix",)
_FIELDS = frozenset(f.name for f in dataclasses.fields(Config)) - {"bootstrap_servers", *KAFKA_MAPPINGS}


@dataclass(frozen=True, slots=True)
class BrokerUrl:
    config: Config
    queue_prefix: str = ""


def parse_url(url: str) -> BrokerUrl:
    """The Config (and broker options) a ``kmq://`` URL names; ConfigError naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != SCHEME:
        raise ConfigError("url", f"must start with {SCHEME}://, got {url.split(':', 1)[0]!r}")
    hosts = unquote(parts.netloc.rpartition("@")[2])
    if not hosts:
        raise ConfigError("url", f"names no bootstrap servers: {SCHEME}://HOST:PORT[,HOST:PORT]/?key=value")
    env = {"KMQ_BOOTSTRAP_SERVERS": hosts}
    data: dict[str, dict[str, str]] = {}
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key in BROKER_KEYS:
            options[key] = value
        elif key.startswith(tuple(f"{mapping}." for mapping in KAFKA_MAPPINGS)):
            group, _, name = key.partition(".")
            data.setdefault(group, {})[name] = value
        elif key in _FIELDS:
            env[f"KMQ_{key.upper()}"] = value
        else:
            close = difflib.get_close_matches(key, sorted(_FIELDS | set(BROKER_KEYS)), n=1)
            raise ConfigError(key, "unknown key in the kmq:// URL" + (f" (did you mean {close[0]}?)" if close else ""))
    # Config.load types each value like its KMQ_* variable and rejects unknown names; the process environment is
    # not consulted: the URL says everything.
    config = Config.load(data, env=env)
    return BrokerUrl(config, **options)
