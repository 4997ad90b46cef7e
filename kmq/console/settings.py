"""The console's own settings: where it listens, who may look and who may act. Secure by default: it listens on
127.0.0.1, nobody may act until an operator is configured, and listening anywhere else needs viewer logins (or
``--anonymous-viewers``, said out loud).

Users come from a YAML file (``--users``, ``KMQ_CONSOLE_USERS_FILE``)::

    users:
      alice: {role: operator, password_hash: "$argon2id$v=19$…"}   # kmq-console hash-password
      deploy-bot: {role: operator, token_sha256: "9f86d0…"}         # sha256 of a token, in hex
      bob: {role: viewer, password_hash: "$argon2id$…"}

or, for one operator, from the environment: ``KMQ_CONSOLE_OPERATOR_PASSWORD_HASH`` and/or
``KMQ_CONSOLE_OPERATOR_TOKEN`` (user ``operator``). Sessions are signed with ``KMQ_CONSOLE_SESSION_SECRET``:
replicas behind one address need the same secret (without one, each process makes its own, and a login holds on
the replica that made it only).
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kmq.config import CONSOLE_ENV_PREFIX
from kmq.errors import ConfigError

OPERATOR, VIEWER = "operator", "viewer"
ROLES = (OPERATOR, VIEWER)
ENV_PREFIX = CONSOLE_ENV_PREFIX
ENV = frozenset(ENV_PREFIX + name for name in ("OPERATOR_PASSWORD_HASH", "OPERATOR_TOKEN", "SESSION_SECRET",
                                              "USERS_FILE", "HOST", "PORT"))


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: str
    #: An argon2 hash (``kmq-console hash-password``), "" for none.
    password_hash: str = field(default="", repr=False)
    #: The sha256 of a token, in hex, "" for none.
    token_sha256: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8088
    users: Mapping[str, User] = field(default_factory=dict, repr=False)
    session_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    #: Viewing without a login (the default on loopback when no viewer is configured).
    anonymous_viewers: bool = False
    #: Session cookies only over HTTPS (behind a TLS-terminating proxy).
    secure_cookies: bool = False
    #: How often the follower reads the topics on.
    refresh_s: float = 1.0
    page_size: int = 50

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError("port", f"{self.port} is not a TCP port")
        if not self.loopback and not self.anonymous_viewers and not self.viewers:
            raise ConfigError("host", f"listening on {self.host} lets anyone who reaches it read queues and payloads: "
                                      "configure viewer or operator logins (--users), or pass --anonymous-viewers")

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"

    @property
    def viewers(self) -> bool:
        """Whether logins are configured (then nobody views without one, unless ``anonymous_viewers``)."""
        return bool(self.users)

    @property
    def open_viewing(self) -> bool:
        return self.anonymous_viewers or not self.users

    @property
    def operators(self) -> bool:
        return any(u.role == OPERATOR for u in self.users.values())


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_users(path: str | Path) -> dict[str, User]:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ConfigError("users", f"cannot read {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise ConfigError("users", f"{path} is not valid YAML: {str(err).splitlines()[0]}") from err
    entries = data.get("users") if isinstance(data, Mapping) else None
    if not isinstance(entries, Mapping):
        raise ConfigError("users", f"{path} must hold a mapping 'users' of name -> {{role, password_hash, "
                                   "token_sha256}}")
    return {str(name): _user(str(name), entry, str(path)) for name, entry in entries.items()}


def _user(name: str, entry: Any, where: str) -> User:
    if not isinstance(entry, Mapping):
        raise ConfigError("users", f"{where}: user {name!r} must be a mapping")
    unknown = set(entry) - {"role", "password_hash", "token_sha256"}
    if unknown:
        raise ConfigError("users", f"{where}: user {name!r} has unknown key(s) {', '.join(sorted(unknown))}")
    role = entry.get("role")
    if role not in ROLES:
        raise ConfigError("users", f"{where}: user {name!r} needs a role, {' or '.join(ROLES)}; got {role!r}")
    password_hash, token = str(entry.get("password_hash") or ""), str(entry.get("token_sha256") or "").lower()
    if password_hash and not password_hash.startswith("$argon2"):
        raise ConfigError("users", f"{where}: user {name!r}: password_hash must be an argon2 hash "
                                   "(kmq-console hash-password)")
    if token and (len(token) != 64 or any(c not in "0123456789abcdef" for c in token)):
        raise ConfigError("users", f"{where}: user {name!r}: token_sha256 must be 64 hex digits")
    if not password_hash and not token:
        raise ConfigError("users", f"{where}: user {name!r} needs a password_hash or a token_sha256")
    return User(name, role, password_hash, token)


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """Settings from ``KMQ_CONSOLE_*`` (an unknown one is an error, as kmq's own ``KMQ_*`` are)."""
    for name in env:
        if name.startswith(ENV_PREFIX) and name not in ENV:
            raise ConfigError(name, f"unknown environment variable (known: {', '.join(sorted(ENV))})")
    out: dict[str, Any] = {}
    users = load_users(env[ENV_PREFIX + "USERS_FILE"]) if env.get(ENV_PREFIX + "USERS_FILE") else {}
    password_hash = env.get(ENV_PREFIX + "OPERATOR_PASSWORD_HASH", "")
    token = env.get(ENV_PREFIX + "OPERATOR_TOKEN", "")
    if password_hash or token:
        users[OPERATOR] = _user(OPERATOR, {"role": OPERATOR, "password_hash": password_hash,
                                           "token_sha256": token_sha256(token) if token else ""},
                                "the environment")
    if users:
        out["users"] = users
    if env.get(ENV_PREFIX + "SESSION_SECRET"):
        out["session_secret"] = env[ENV_PREFIX + "SESSION_SECRET"]
    if env.get(ENV_PREFIX + "HOST"):
        out["host"] = env[ENV_PREFIX + "HOST"]
    if env.get(ENV_PREFIX + "PORT"):
        try:
            out["port"] = int(env[ENV_PREFIX + "PORT"])
        except ValueError:
            raise ConfigError("port", f"{ENV_PREFIX}PORT={env[ENV_PREFIX + 'PORT']!r} is not an integer") from None
    return out
