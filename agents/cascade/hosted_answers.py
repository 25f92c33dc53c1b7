"""An OpenAI-compatible server's JSON answer, or an error that says what went wrong: for
the hosted words judge and the hosted STT."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["posted_json", "server_reason"]


def posted_json(
    client: httpx.Client, url: str, *, error: type[Exception], where: str, **request: Any
) -> Any:
    """POST `request` to `url` and return its JSON answer. Anything else raises `error`
    naming `where` (the URL without credentials): the connection's failure, a status
    other than 200 with the server's own reason, or a 200 that is not JSON (a proxy's
    page)."""
    try:
        response = client.post(url, **request)
        payload = response.json() if response.status_code == 200 else None
    except httpx.HTTPError as exc:
        raise error(f"{where}: {type(exc).__name__}: {exc}") from exc
    except ValueError as exc:
        raise error(f"{where}: the answer is not JSON") from exc
    if payload is None:
        raise error(f"{where}: HTTP {response.status_code}{server_reason(response)}")
    return payload


def server_reason(response: httpx.Response) -> str:
    """The reason an OpenAI-style error answer gives, after a colon, or nothing. Never
    the body: that may quote the prompt or the transcript, which hold the caller's
    words."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        return ""
    return f": {str(message)[:120]}" if message else ""
