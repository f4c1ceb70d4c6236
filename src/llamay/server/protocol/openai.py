"""OpenAI-compatible API (ref: ../shared/docs/protocols/openai.md): the public names the app wires in.

Chat: parse_chat, ChatOutput; legacy completions: parse_completion, CompletionOutput; Responses:
parse_responses, ResponsesOutput (its fail(err) gives the mid-stream error frames); models_body,
model_body; error_body, stream_error (chat/completions streams)."""
from __future__ import annotations

from .base import ModelInfo, ProtocolError
from .openai_chat import ChatOutput, parse_chat
from .openai_common import error_object, frame
from .openai_completions import CompletionOutput, parse_completion
from .openai_responses import ResponsesOutput, parse_responses

__all__ = [
    "ChatOutput",
    "CompletionOutput",
    "ResponsesOutput",
    "error_body",
    "model_body",
    "models_body",
    "parse_chat",
    "parse_completion",
    "parse_responses",
    "stream_error",
]

OWNED_BY = "llamay"


def model_body(info: ModelInfo) -> dict:
    """GET /v1/models/{id}: id is the name clients pass as `model`; created from the file's mtime."""
    return {"id": info.name, "object": "model", "created": int(info.modified_at), "owned_by": OWNED_BY}


def models_body(models: list[ModelInfo]) -> dict:
    return {"object": "list", "data": [model_body(m) for m in models]}


def error_body(err: ProtocolError) -> dict:
    """The body for err.status: {"error": {message, type, param, code}}."""
    return {"error": error_object(err)}


def stream_error(err: ProtocolError) -> str:
    """The last frame of a chat/completions stream that failed after it began: the SDK raises APIError
    on a data payload with a top-level `error`. (Responses streams use ResponsesOutput.fail.)"""
    return frame(error_body(err))
