"""The one internal request/response model every protocol converts to and from (pure data, no I/O).

A converter parses a request body into a GenRequest (request.py), and turns the engine's Delta/Finish events
(llamay/events.py) back into its API's response (whole, or streamed). Errors are ProtocolError; each API renders them in its own shape."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ...events import Delta, Finish, Usage


class ProtocolError(Exception):
    """A request the server answers with an error: status, message, and an API-neutral kind.

    kind: 'invalid_request' (400), 'not_found' (404: unknown model or context), 'context_length' (400: prompt
    over the context), 'overloaded' (503), 'authentication' (401), 'not_supported' (501), 'internal' (500).
    detail: extra fields of the error object (context_length: n_prompt_tokens and n_ctx, llama-server's)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request", param: str | None = None,
                 detail: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.detail = detail or {}


def bad_request(message: str, param: str | None = None) -> ProtocolError:
    return ProtocolError(400, message, "invalid_request", param)


class Output(Protocol):
    """One response being built from the engine's events, in one API's shape (each converter's *Output)."""

    def feed(self, ev: Delta | Finish) -> list[str]:
        """The frames to stream now (a whole response ignores them and asks body() at the end)."""

    def end(self) -> list[str]:
        """The frames that close a stream that finished."""

    def body(self) -> dict:
        """The whole response, once every choice finished."""

    def fail(self, err: ProtocolError) -> list[str]:
        """The frames that end a stream broken by err, in the API's error shape."""


@dataclass
class ResponseMeta:
    """What the route fixes before the first event: the response id, creation time, echoed model name."""
    id: str
    created: int  # unix seconds
    model: str | None  # None: the server's default model
    created_ns: int = 0  # unix nanoseconds (Ollama's created_at)
    slot: int = -1  # the llama-server slot serving it (server/slots.py); -1: none


def merge_usage(finishes: list[Finish]) -> Usage:
    """One request's usage over its n choices: the prompt counted once, completions summed."""
    first = finishes[0].usage
    total = Usage(first.prompt_tokens, first.cached_tokens, 0, first.load_ns, first.prompt_eval_ns,
                  disk_tokens=first.disk_tokens, shared_tokens=first.shared_tokens)
    for f in finishes:
        total.completion_tokens += f.usage.completion_tokens
        total.eval_ns = max(total.eval_ns, f.usage.eval_ns)
        total.total_ns = max(total.total_ns, f.usage.total_ns)
        total.drafted_tokens += f.usage.drafted_tokens
        total.accepted_tokens += f.usage.accepted_tokens
    return total


@dataclass
class ModelInfo:
    """A model as the listing routes describe it (/v1/models, /api/tags, /api/show, /api/ps)."""
    name: str  # what clients pass as `model`, e.g. "smollm2:135m" or a file name
    path: str
    size: int  # bytes of the GGUF file
    digest: str  # sha256 hex of the file
    modified_at: float  # unix seconds
    architecture: str  # general.architecture, e.g. "llama"
    parameter_size: str  # e.g. "135M"
    quantization_level: str  # e.g. "Q4_1"
    context_length: int  # the context the server runs it with
    metadata: dict[str, Any] = field(default_factory=dict)  # GGUF key/values, big arrays left out
    template: str = ""  # tokenizer.chat_template
    loaded: bool = False
    expires_at: float | None = None  # unix seconds when it unloads (loaded models); None: never
    size_vram: int = 0
