"""llama-server's native API (ref: ../shared/docs/protocols/llama-server.md §2; llama.cpp tools/server/
server-schema.cpp and server-context.cpp): /completion and /infill bodies -> GenRequests, slot actions,
/apply-template. The response side is llamacpp_out.py, re-exported here for the routes."""
from __future__ import annotations

import dataclasses
from typing import Any

from .base import bad_request
from .llamacpp_infill import Infill
from .llamacpp_out import CompletionOutput, ModelView, error_body, generation_settings, props_body, slot_body
from .llamacpp_params import parse_extras, parse_logit_bias, parse_mixed, parse_n_probs, parse_prompts, parse_sampling
from .openai_chat import parse_chat, parse_response_format
from .openai_common import MAX_N, get_bool, get_field, get_int, get_str, optional_model, require_body
from .request import GenRequest, Sampling

__all__ = ["CompletionOutput", "Infill", "ModelView", "error_body", "generation_settings", "parse_apply_template",
           "parse_completion", "parse_filename", "parse_infill", "parse_slot_action", "props_body", "slot_body"]

# the routes answering in llama-server's error shape (server/guard.py's refusals too), and /slots/{id}
NATIVE_PATHS = frozenset({"/completion", "/completions", "/infill", "/apply-template", "/props", "/slots",
                          "/embedding", "/embeddings"})
MAX_N_PROBS = 100  # top tokens reported per generated token
INT32_MAX = 2**31 - 1
SLOT_ACTIONS = ("save", "restore", "erase")


def parse_completion(body: Any) -> list[GenRequest]:
    """One request per prompt (an array of prompts is a batch: one result each)."""
    body = require_body(body)
    if body.get("prompt") is None:
        raise bad_request("'prompt' is required", "prompt")
    prompts = parse_prompts(body["prompt"])
    base = _request(body)
    if base.stream and len(prompts) > 1:
        raise bad_request(f"'prompt' holds {len(prompts)} prompts: stream them one request each, or send the "
                          "batch without stream", "prompt")
    return [dataclasses.replace(base, prompt=p) for p in prompts]


def _request(body: dict) -> GenRequest:
    """Every /completion field but the prompt (absent or null: the server's defaults)."""
    extra_sampling, llama = parse_extras(body)
    n_probs = parse_n_probs(body, MAX_N_PROBS)
    llama = dataclasses.replace(
        llama, return_tokens=bool(get_bool(body, "return_tokens")), grammar=get_str(body, "grammar") or None,
        logit_bias=tuple(parse_logit_bias(body)), response_fields=tuple(_strings(body, "response_fields")))
    return GenRequest(model=optional_model(body), raw=True, stream=bool(get_bool(body, "stream")),
                      n=next((n for n in (get_int(body, k, 1, MAX_N) for k in ("n_cmpl", "n")) if n), 1),
                      stop=_strings(body, "stop"), max_tokens=_n_predict(body),
                      sampling=Sampling(**{**parse_sampling(body), **extra_sampling}),
                      logprobs=n_probs > 0, top_logprobs=n_probs, format=parse_response_format(body), llama=llama)


def _n_predict(body: dict) -> int | None:
    """n_predict (or max_completion_tokens, max_tokens): -1 until the end (None), 0 the prompt only."""
    for name in ("n_predict", "max_completion_tokens", "max_tokens"):
        value = get_int(body, name, -1, INT32_MAX)
        if value is not None:
            return None if value == -1 else value
    return None


def _strings(body: dict, name: str) -> list[str]:
    """A string or an array of strings (empty ones dropped)."""
    value = get_field(body, name, (str, list), "a string or an array of strings")
    values = [value] if isinstance(value, str) else value or []
    if not all(isinstance(v, str) for v in values):
        raise bad_request(f"'{name}' must be a string or an array of strings", name)
    return [v for v in values if v]


def parse_infill(body: Any) -> tuple[GenRequest, Infill]:
    """input_prefix, input_suffix (required), input_extra [{text, filename?}], prompt, and every
    /completion field but prompt's shapes; the route builds the prompt from the model's FIM tokens."""
    body = require_body(body)
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise bad_request('"prompt" must be a string', "prompt")
    parts = []
    for name in ("input_prefix", "input_suffix"):
        if body.get(name) is None:
            raise bad_request(f'"{name}" is required', name)
        parts.append(parse_mixed(body[name], name))
    extra = body.get("input_extra", [])
    if not isinstance(extra, list):
        raise bad_request('"input_extra" must be an array of {"filename": string, "text": string}', "input_extra")
    chunks = []
    for chunk in extra:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise bad_request('extra_context chunk must contain a "text" field with a string value', "input_extra")
        if not isinstance(chunk.get("filename", ""), str):
            raise bad_request('extra_context chunk\'s "filename" field must be a string', "input_extra")
        chunks.append((chunk.get("filename", "tmp"), chunk["text"]))
    return _request(body), Infill(parts[0], parts[1], chunks, prompt)


def parse_slot_action(id_slot: str, action: str | None) -> tuple[int, str]:
    try:
        slot = int(id_slot)
    except ValueError:
        raise bad_request("Invalid slot ID", "id_slot") from None
    if action not in SLOT_ACTIONS:
        raise bad_request("Invalid action", "action")
    return slot, action


def parse_filename(body: Any) -> str:
    name = body.get("filename") if isinstance(body, dict) else None
    if not isinstance(name, str) or not valid_filename(name):
        raise bad_request("Invalid filename", "filename")
    return name


def valid_filename(name: str) -> bool:
    """A plain file name (ref: llama.cpp common/common.cpp fs_validate_filename): 1-255 bytes of UTF-8,
    no control characters, path separators, : * ? " < > |, look-alike slashes and dots, surrogates,
    U+FFFD or BOM; no leading or trailing space, no trailing dot, no '..'."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate
        return False
    if not 0 < size <= 255 or name[0] == " " or name[-1] in " ." or ".." in name:
        return False
    banned = set('/\\:*?"<>|') | {"\u2215", "\u2216", "\uff0e", "\ufffd", "\ufeff"}
    return not any(c in banned or ord(c) <= 0x1F or 0x7F <= ord(c) <= 0x9F for c in name)


def parse_apply_template(body: Any) -> tuple[GenRequest, bool]:
    """The chat fields of /v1/chat/completions (messages, tools, chat_template_kwargs) -> (request,
    add_generation_prompt, default true)."""
    req = parse_chat(body)
    add = get_bool(body, "add_generation_prompt")
    return req, add is not False
