"""An OpenAI-compatible chat server that answers from a script: text, or tool calls.

It streams `chat.completion.chunk` events over server-sent events exactly as the
Chat Completions API does (https://platform.openai.com/docs/api-reference/chat-streaming):
a tool call arrives as `delta.tool_calls[{index, id, type, function: {name, arguments}}]`
with the arguments in pieces, and the last chunk has `finish_reason: "tool_calls"`.
Every request body is kept, so a test sees which tools were offered.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ops.local_server import ServerThread, free_port

MODEL = "fake-tools-model"


@dataclass(frozen=True)
class Say:
    """A plain spoken reply."""

    text: str


@dataclass(frozen=True)
class CallTool:
    """A tool call, optionally after some words."""

    name: str
    arguments: str = "{}"
    text: str = ""


@dataclass(frozen=True)
class WriteTool:
    """A model without function calling writing the call out as text."""

    name: str


Reply = Say | CallTool | WriteTool


class FakeLlm:
    """Replies in script order (the last one repeats); `refuse_tools`: HTTP 400 for a
    request that offers tools, as endpoints without function calling answer."""

    def __init__(self, *replies: Reply, refuse_tools: bool = False) -> None:
        self.replies = list(replies) or [Say("Sure.")]
        self.refuse_tools = refuse_tools
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.url = ""
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/v1/models", self._models),
            ]
        )

    def serve(self, servers: ServerThread) -> str:
        self.url = servers.serve(self.app, free_port()) + "/v1"
        return self.url

    def offered_tools(self) -> list[list[str]]:
        """The tool names offered in each request, in order."""
        with self._lock:
            return [[t["function"]["name"] for t in r.get("tools", [])] for r in self.requests]

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            index = min(len(self.requests) - 1, len(self.replies) - 1)
        if self.refuse_tools and body.get("tools"):
            error = {
                "message": "tools are not supported by this model",
                "type": "invalid_request_error",
                "param": "tools",
                "code": None,
            }
            return JSONResponse({"error": error}, status_code=400)
        events = _chunks(self.replies[index], offered=bool(body.get("tools")))
        lines = (f"data: {json.dumps(event)}\n\n" for event in events)
        return StreamingResponse(
            itertools.chain(lines, ["data: [DONE]\n\n"]),
            media_type="text/event-stream",
        )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _chunks(reply: Reply, *, offered: bool) -> Iterator[dict[str, Any]]:
    yield _chunk({"role": "assistant", "content": ""})
    match reply:
        case Say(text=text):
            for word in text.split(" "):
                yield _chunk({"content": word + " "})
            yield _chunk({}, "stop")
        case CallTool(name=name, arguments=arguments, text=text):
            if text:
                yield _chunk({"content": text})
            if not offered:  # no tools offered: a real endpoint would not call one
                yield _chunk({}, "stop")
                return
            call = {"index": 0, "id": "call_1", "type": "function"}
            yield _chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]})
            half = len(arguments) // 2
            for piece in (arguments[:half], arguments[half:]):
                yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            yield _chunk({}, "tool_calls")
        case WriteTool(name=name):
            written = json.dumps({"name": name, "arguments": {}})
            for start in range(0, len(written), 7):
                yield _chunk({"content": written[start : start + 7]})
            yield _chunk({}, "stop")
