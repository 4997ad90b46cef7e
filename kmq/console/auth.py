"""Who is asking, and may they: logins (argon2 password hashes or sha256 token digests, kmq.console.settings), the
viewer and operator roles, and the CSRF token every action must carry.

The session is a cookie signed with the session secret (Starlette's SessionMiddleware, itsdangerous), SameSite
strict; it holds the user's name and role and a random CSRF token. An action is refused unless the request
carries that token (form field ``csrf`` or header ``X-CSRF-Token``), compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

import structlog
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from starlette.exceptions import HTTPException
from starlette.requests import Request

from kmq.console.settings import OPERATOR, VIEWER, Settings, User, token_sha256

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

_HASHER = PasswordHasher()
CSRF_FIELD, CSRF_HEADER = "csrf", "x-csrf-token"


@dataclass(frozen=True, slots=True)
class Who:
    """The one asking: a logged-in user, or anonymous (``name`` "")."""

    name: str
    role: str
    client: str

    @property
    def operator(self) -> bool:
        return self.role == OPERATOR

    def __str__(self) -> str:
        return self.name or "anonymous"


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def check(user: User | None, secret: str) -> bool:
    """Whether ``secret`` is the user's password or token."""
    if user is None or not secret:
        return False
    if user.token_sha256 and hmac.compare_digest(token_sha256(secret), user.token_sha256):
        return True
    if user.password_hash:
        try:
            return _HASHER.verify(user.password_hash, secret)
        except (VerificationError, InvalidHashError):
            return False
    return False


def who(request: Request) -> Who:
    session = request.session
    client = request.client.host if request.client else ""
    return Who(str(session.get("user", "")), str(session.get("role", "")), client)


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made on first use)."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or not token:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return token


def log_in(request: Request, user: User) -> None:
    request.session.clear()
    request.session.update({"user": user.name, "role": user.role, "csrf": secrets.token_urlsafe(32)})


def log_out(request: Request) -> None:
    request.session.clear()


def require_viewer(request: Request, settings: Settings) -> Who:
    """The viewer (or operator) asking; 401 when a login is needed to look."""
    asking = who(request)
    if asking.role in (VIEWER, OPERATOR) or settings.open_viewing:
        return asking
    raise HTTPException(401, "log in to view the console")


async def require_operator(request: Request, action: str) -> Who:
    """The operator asking, with the session's CSRF token; 403 (logged) otherwise."""
    asking = who(request)
    if not asking.operator:
        log.warning("console_action_refused", action=action, user=str(asking), client=asking.client,
                    why="not an operator")
        raise HTTPException(403, f"{action} needs an operator login")
    await check_csrf(request, action)
    return asking


async def check_csrf(request: Request, action: str) -> None:
    form = await request.form()
    given = str(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or "")
    expected = request.session.get("csrf")
    if not isinstance(expected, str) or not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        asking = who(request)
        log.warning("console_action_refused", action=action, user=str(asking), client=asking.client,
                    why="bad CSRF token")
        raise HTTPException(403, f"{action} refused: the form's CSRF token does not match this session "
                                 "(reload the page and try again)")
