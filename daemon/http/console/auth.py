"""Who is asking, and may they act: basic auth (or a bearer token) with two roles, and CSRF checks.

Two users: ``admin`` may act (create, send, cancel, replay, purge), ``viewer`` may only look. A
password is also accepted as ``Authorization: Bearer <password>``, for scripts and proxies.

Why CSRF protection although every request is authenticated: a browser re-sends basic-auth
credentials on its own, so a page on another site could make the operator's browser post a purge.
Every action therefore needs a token that only a page of this console knows: an HMAC of the user
name keyed by that user's password, so it survives restarts and works across replicas, and a
forged form (which can't read our pages) can't produce it. Requests that a browser marks as
cross-site (``Sec-Fetch-Site``) or whose ``Origin`` is another host are refused too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import urlsplit

from daemon.base.config import ConsoleSettings
from daemon.base.errors import ConfigError

REALM = 'Basic realm="casque console", charset="UTF-8"'


@dataclass(frozen=True)
class User:
    name: str
    can_act: bool
    csrf: str


class Auth:
    def __init__(self, settings: ConsoleSettings) -> None:
        self._passwords = {
            name: pw for name, pw in (("admin", settings.admin_password), ("viewer", settings.viewer_password)) if pw
        }
        if not self._passwords:
            raise ConfigError(
                "the console needs console.admin_password (and optionally console.viewer_password): "
                "set them in the config file or as CASQUE_CONSOLE__ADMIN_PASSWORD"
            )
        if settings.admin_password and settings.admin_password == settings.viewer_password:
            raise ConfigError(
                "console.admin_password and console.viewer_password are the same: a bearer token could not tell "
                "the roles apart; give the viewer its own password"
            )

    def identify(self, authorization: str | None) -> User | None:
        """The user an ``Authorization`` header names, or None (wrong, missing or malformed)."""
        name, password = _credentials(authorization or "")
        for user, expected in self._passwords.items():
            if (name in (None, user)) and hmac.compare_digest(password.encode(), expected.encode()):
                return User(user, user == "admin", self._csrf(user, expected))
        return None

    @staticmethod
    def _csrf(user: str, password: str) -> str:
        return hmac.new(password.encode(), f"casque-console-csrf:{user}".encode(), hashlib.sha256).hexdigest()


def _credentials(header: str) -> tuple[str | None, str]:
    """(user, password) from ``Basic``; (None, token) from ``Bearer``; ('', '') otherwise."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return None, value.strip()
    if scheme.lower() != "basic":
        return "", ""
    try:
        user, _, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    return user, password


def csrf_ok(user: User, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(user.csrf, token or "")


def same_origin(headers: dict[str, str], host: str) -> bool:
    """False when the browser says the request came from another site."""
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    return origin is None or urlsplit(origin).netloc == host
