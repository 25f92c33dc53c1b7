"""What a child process (the embedded LLM server, a local worker) may see of ours.

Children inherit the environment for PATH, locale, thread and library settings, and a
worker for offhook's own settings; none of them talks to Twilio, so Twilio's auth token
and the call-token secret never reach them (a crashed child's core dump, its /proc
environ or a library that logs its environment cannot leak them).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["SERVER_SECRETS", "child_environment"]

SERVER_SECRETS = frozenset({"TWILIO_AUTH_TOKEN", "TWILIO_ACCOUNT_SID", "CALL_TOKEN_SECRET"})


def child_environment(
    environ: Mapping[str, str] | None = None, *, drop: Iterable[str] = SERVER_SECRETS
) -> dict[str, str]:
    """`environ` (default: ours) without the variables named in `drop`."""
    environ = os.environ if environ is None else environ
    dropped = {name.upper() for name in drop}
    return {key: value for key, value in environ.items() if key.upper() not in dropped}
