"""Credentials out of everything tunetrain writes: one function, :func:`redact`, that every
place writing a URI or a command line (tags, the journal, console and log lines, the UI
server's arguments) calls, and :func:`split_credentials`, which takes an MLflow server's
user and password out of its URI into the variables MLflow's client reads instead.

Written here rather than taken from a library: MLflow has no public redaction function
(its ``mlflow.utils.uri`` strips user-info only for Databricks profiles), and the rule is
two regular expressions."""

from __future__ import annotations

import re
import urllib.parse

MASK = "***"

# scheme://USER:PASSWORD@host -> scheme://***@host (the user name too: it may be a token).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s'\"]+)@")
# ?token=..., &password=..., &X-Amz-Signature=...: the value of any such query parameter.
_SECRET_PARAM = re.compile(
    r"(?P<name>[?&;][^=&\s'\"]*(?:token|password|passwd|secret|signature|sig|key|auth|credential)[^=&\s'\"]*=)"
    r"(?P<value>[^&\s'\"]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with every URI's user-info and every secret-looking query value masked."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m['name']}{MASK}", text)


def split_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """An http(s) URI without its user-info, and the user and password it held (None where
    it held none). MLflow's client sends ``MLFLOW_TRACKING_USERNAME`` and
    ``MLFLOW_TRACKING_PASSWORD`` as basic auth to any server, so the URI that is recorded,
    printed and passed on need not carry them."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return uri, None, None
    host = parts.netloc.rsplit("@", 1)[1]
    clean = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    user = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return clean, user, password


def strip_credentials(uri: str) -> str:
    """``uri`` as it may be recorded and used again without its secrets: an http(s) URI
    without user-info (the user and password go in MLflow's variables), any other without
    its password (``postgresql://user@host/db``: PostgreSQL reads ``PGPASSWORD``)."""
    if uri.startswith(("http://", "https://")):
        return split_credentials(uri)[0]
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    user, host = parts.netloc.rsplit("@", 1)[0].split(":", 1)[0], parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))
