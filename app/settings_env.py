"""How the settings object meets the environment: a field declared with its variable,
read from it (typed, with a clear error), and described for the docs and `offhook
settings` (secrets masked, URLs without credentials)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any

from agents.config import shown_url
from app.settings_checks import SettingsError

__all__ = ["described", "env_field", "env_values", "shown_fields"]


def env_field(env: str, default: Any, doc: str, *, secret: bool = False, url: bool = False) -> Any:
    """A setting read from `env`. Secrets stay out of repr: a Settings in a log line or
    a traceback must not leak them. URLs are shown without credentials or query strings
    (`shown_url`)."""
    return field(
        default=default,
        repr=not secret,
        metadata={"env": env, "doc": doc, "secret": secret, "url": url},
    )


def env_values(cls: type, environ: Mapping[str, str]) -> dict[str, Any]:
    """The fields of `cls` that `environ` sets, each of its field's type."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        env = f.metadata.get("env")
        if env is not None and env in environ:
            values[f.name] = _coerce(env, environ[env], type(f.default))
    return values


def shown_fields(settings: Any) -> str:
    """`name=value` of every field repr may show, URLs without credentials."""
    return ", ".join(
        f"{f.name}={shown_url(value) if f.metadata.get('url') else value!r}"
        for f in fields(settings)
        if f.repr and (value := getattr(settings, f.name)) is not None
    )


def described(cls: type, current: Any = None) -> list[tuple[str, str, str]]:
    """(variable, value, meaning) for every setting of `cls`: `current`'s values, or the
    defaults."""
    rows = []
    for f in fields(cls):
        env = f.metadata.get("env")
        if env is None:
            continue
        value = getattr(current, f.name) if current is not None else f.default
        if f.metadata.get("secret") and value:
            value = "***"
        elif f.metadata.get("url") and value:
            value = shown_url(str(value))
        rows.append((env, str(value), f.metadata["doc"]))
    return rows


def _coerce(env: str, raw: str, kind: type) -> Any:
    raw = raw.strip()
    try:
        if kind is bool:
            lowered = raw.lower()
            if lowered in {"1", "true", "yes", "on"}:
                return True
            if lowered in {"0", "false", "no", "off", ""}:
                return False
            raise ValueError(raw)
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        raise SettingsError(f"{env} must be a {kind.__name__}, got {raw!r}") from None
    return raw
