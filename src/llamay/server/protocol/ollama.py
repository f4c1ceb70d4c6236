"""Ollama's native API (/api/*): request bodies -> GenRequest; the response side is in ollama_out.py and
re-exported here, so routes import everything from this module.

Wire reference: shared/docs/protocols/ollama.md (Ollama server code at v0.33; Python client ollama==0.6.3)."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

from .base import bad_request
from .ollama_out import (
    OllamaChatOutput,
    OllamaGenerateOutput,
    capabilities,
    error_body,
    ps_body,
    rfc3339_nano,
    show_body,
    stream_error,
    tags_body,
    version_body,
)
from .openai_common import TOP_K_OFF, check_function_tool
from .request import FRESH_SEED, GenRequest, OllamaOptions, Sampling

__all__ = [
    "OLLAMA_DEFAULTS", "OllamaChatOutput", "OllamaGenerateOutput", "capabilities", "error_body", "parse_chat",
    "parse_copy", "parse_delete", "parse_generate", "parse_go_duration", "parse_keep_alive", "parse_show",
    "ps_body", "rfc3339_nano", "show_body", "stream_error", "tags_body", "version_body",
]

log = logging.getLogger(__name__)

# Ollama's api.DefaultOptions for the sampling knobs (doc §8); its seed -1 (random) is left unset, a fresh one.
OLLAMA_DEFAULTS = Sampling(temperature=0.8, top_k=40, top_p=0.9, min_p=0.0, repeat_penalty=1.0, repeat_last_n=64,
                           presence_penalty=0.0, frequency_penalty=0.0)

# Known `options` keys and their Go kinds (api.Options). Keys not here are ignored with a warning, as
# Ollama does (this includes the retired numa, low_vram, f16_kv, mirostat*, tfs_z, penalize_newline, ...).
_INT, _FLOAT, _BOOL, _STRINGS = "integer", "float32", "boolean", "array"
_OPTION_KINDS: dict[str, str] = {
    "num_keep": _INT, "seed": _INT, "num_predict": _INT, "top_k": _INT, "repeat_last_n": _INT,
    "top_p": _FLOAT, "min_p": _FLOAT, "typical_p": _FLOAT, "temperature": _FLOAT, "repeat_penalty": _FLOAT,
    "presence_penalty": _FLOAT, "frequency_penalty": _FLOAT, "stop": _STRINGS,
    "num_ctx": _INT, "num_batch": _INT, "num_gpu": _INT, "main_gpu": _INT, "use_mmap": _BOOL,
    "num_thread": _INT, "draft_num_predict": _INT,
}
_THINK_LEVELS = ("low", "medium", "high", "max")

# ---------------------------------------------------------------------------------------------- durations

_NS_PER_UNIT = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
                "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_MAX_NS = 1 << 63  # |d| bound: d <= 2**63 - 1, or -d >= -2**63


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration string, by Go's time.ParseDuration rules: [-+]?("0" | (number unit)+),
    number = digits[.digits] or .digits, units ns us µs μs ms s m h; int64 range; a fraction is scaled
    through float64 as Go does. Raises ValueError with Go's message."""
    neg = text.startswith("-")
    rest = text[1:] if text.startswith(("-", "+")) else text
    if rest == "0":
        return 0
    if not rest:
        raise ValueError(f"time: invalid duration {_goquote(text)}")
    total = 0
    while rest:
        amount, rest = _duration_term(rest, text)
        total += amount
        if total > _MAX_NS:
            raise ValueError(f"time: invalid duration {_goquote(text)}")
    if not neg and total > _MAX_NS - 1:
        raise ValueError(f"time: invalid duration {_goquote(text)}")
    return -total if neg else total


def _duration_term(s: str, whole: str) -> tuple[int, str]:
    """One `number unit` from the start of s -> (nanoseconds, rest of s)."""
    invalid = ValueError(f"time: invalid duration {_goquote(whole)}")
    int_digits = _leading(s, "0123456789")
    frac_digits, after = "", s[len(int_digits):]
    if after.startswith("."):
        frac_digits = _leading(after[1:], "0123456789")
        after = after[1 + len(frac_digits):]
    if not int_digits and not frac_digits:
        raise invalid
    unit = _leading_not(after, "0123456789.")
    if not unit:
        raise ValueError(f"time: missing unit in duration {_goquote(whole)}")
    if unit not in _NS_PER_UNIT:
        raise ValueError(f"time: unknown unit {_goquote(unit)} in duration {_goquote(whole)}")
    per = _NS_PER_UNIT[unit]
    whole_units = int(int_digits or "0")
    if whole_units > _MAX_NS // per:
        raise invalid
    ns = whole_units * per
    frac, scale = _fraction(frac_digits)
    if frac:
        ns += int(float(frac) * (float(per) / scale))  # Go: float64 keeps fractions of hours ns-exact
    if ns > _MAX_NS:
        raise invalid
    return ns, after[len(unit):]


def _fraction(digits: str) -> tuple[int, float]:
    """Go's leadingFraction: the digits as an integer and 10**n, ignoring digits once it would overflow."""
    value, scale = 0, 1.0
    for c in digits:
        nxt = value * 10 + int(c)
        if value > (_MAX_NS - 1) // 10 or nxt > _MAX_NS:
            break
        value, scale = nxt, scale * 10
    return value, scale


def _leading(s: str, chars: str) -> str:
    n = 0
    while n < len(s) and s[n] in chars:
        n += 1
    return s[:n]


def _leading_not(s: str, chars: str) -> str:
    n = 0
    while n < len(s) and s[n] not in chars:
        n += 1
    return s[:n]


def _goquote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_keep_alive(value: Any) -> float | None:
    """keep_alive -> seconds (None: absent, the server default; -1.0: forever, for any negative input).
    A number is seconds; a string is a Go duration (a bare number other than "0" has no unit: 400)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad_request(f"keep_alive: Unsupported type: '{_go_type(value)}'", "keep_alive")
    if isinstance(value, str):
        try:
            seconds = parse_go_duration(value) / 1e9
        except ValueError as e:
            raise bad_request(f"keep_alive: {e}", "keep_alive") from None
    else:
        seconds = float(value)
    return -1.0 if seconds < 0 else seconds


def _go_type(value: Any) -> str:
    return {bool: "bool", list: "[]interface {}", dict: "map[string]interface {}"}.get(type(value), "unknown")

# ------------------------------------------------------------------------------------------------ options


def _option_value(key: str, value: Any, kind: str) -> Any:
    """One known option checked like Go's Options.FromMap: numbers for int fields are truncated."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _INT and number:
        return int(value)
    if kind == _FLOAT and number:
        return float(value)
    if kind == _BOOL and isinstance(value, bool):
        return value
    if kind == _STRINGS and isinstance(value, str):
        return [value]  # lenient: Ollama wants an array; OpenAI-style clients send one string
    if kind == _STRINGS and isinstance(value, list):
        if not all(isinstance(s, str) for s in value):
            raise bad_request(f'option "{key}" must be of an array of strings', f"options.{key}")
        return list(value)
    raise bad_request(f'option "{key}" must be of type {kind}', f"options.{key}")


def _parse_options(raw: Any) -> dict[str, Any]:
    """The request's `options` object -> {known key: checked value}; null values count as unset."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad_request("options must be an object", "options")
    out = {}
    for key, value in raw.items():
        if key not in _OPTION_KINDS:
            log.warning("invalid option provided: %s", key)
        elif value is not None:
            out[key] = _option_value(key, value, _OPTION_KINDS[key])
    return out


def _apply_options(req: GenRequest, opts: dict[str, Any]) -> None:
    """Sampling knobs -> req.sampling (Ollama's defaults below them); num_predict -> max_tokens (<= 0:
    unlimited, as Ollama's runner treats it); stop -> req.stop; the rest (num_ctx, ...) are checked, not run."""
    sampling = Sampling.of(opts)
    if sampling.seed is not None and sampling.seed < 0:
        sampling = dataclasses.replace(sampling, seed=FRESH_SEED)  # -1: a random seed
    if sampling.top_k == TOP_K_OFF:
        sampling = dataclasses.replace(sampling, top_k=0)  # vLLM's and SGLang's "off", as gateways send it
    req.sampling, req.sampling_defaults = sampling, OLLAMA_DEFAULTS
    n_predict = opts.get("num_predict")
    req.max_tokens = n_predict if n_predict is not None and n_predict > 0 else None
    req.stop = opts.get("stop", [])
    req.ollama = OllamaOptions(num_predict=n_predict)

# ---------------------------------------------------------------------------------------- common fields


def _field(body: dict, key: str, kind: type, default: Any = None, what: str = "") -> Any:
    """body[key] checked to be a `kind` (a bool is not an int here); absent or null -> default."""
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise bad_request(f"{key} must be {what}", key)
    return value


def _model(body: Any) -> str | None:
    """The model named, or None (absent, null or ""): the server's default model."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise bad_request("model must be a string", "model")
    return name or None


def _format(value: Any) -> Any:
    """'' / null: none; "json"; a JSON Schema object. Anything else is 400 as in Ollama."""
    if value is None or value == "":
        return None
    if value == "json" or isinstance(value, dict):
        return value
    raise bad_request(f'invalid format: {value!r}; expected "json" or a valid JSON Schema object', "format")


def _think(value: Any) -> bool | str:
    if isinstance(value, bool) or isinstance(value, str) and value in _THINK_LEVELS:
        return value
    raise bad_request(f"invalid think value: {value!r} (must be a boolean or one of "
                      f"{', '.join(_THINK_LEVELS)})", "think")


def _common(body: dict, req: GenRequest) -> None:
    """Fields /api/generate and /api/chat share: stream (default true), format, keep_alive, options,
    think, truncate, shift, logprobs, top_logprobs."""
    req.stream = _field(body, "stream", bool, True, "a boolean")
    req.format = _format(body.get("format"))
    req.keep_alive = parse_keep_alive(body.get("keep_alive"))
    _apply_options(req, _parse_options(body.get("options")))
    think = _think(body["think"]) if body.get("think") is not None else None
    truncate, shift = (_field(body, key, bool, what="a boolean") for key in ("truncate", "shift"))
    req.ollama = dataclasses.replace(req.ollama, think=think, truncate=truncate, shift=shift)
    req.logprobs = _field(body, "logprobs", bool, False, "a boolean")
    req.top_logprobs = _field(body, "top_logprobs", int, 0, "an integer")
    if not 0 <= req.top_logprobs <= 20:
        raise bad_request("top_logprobs must be between 0 and 20", "top_logprobs")


def _mark_load(req: GenRequest) -> None:
    """Empty prompt / messages: Ollama's load request, or unload with keep_alive 0."""
    req.ollama = dataclasses.replace(req.ollama, load="unload" if req.keep_alive == 0 else "load")


def _no_images(images: Any, param: str) -> None:
    if images:
        raise bad_request("images are not supported: llamay serves text-only models", param)

# --------------------------------------------------------------------------------------------- generate


def parse_generate(body: Any) -> GenRequest:
    """POST /api/generate -> GenRequest (prompt text; raw: no template)."""
    req = GenRequest(model=_model(body))
    req.prompt = _field(body, "prompt", str, "", "a string")
    req.suffix = _field(body, "suffix", str, None, "a string") or None
    req.system = _field(body, "system", str, None, "a string") or None
    req.template = _field(body, "template", str, None, "a string") or None
    req.raw = _field(body, "raw", bool, False, "a boolean")
    req.context = _context(body.get("context"))
    if req.raw and (req.template or req.system or req.context):
        raise bad_request("raw mode does not support template, system, or context", "raw")
    _no_images(body.get("images"), "images")
    _common(body, req)
    if req.prompt == "":
        _mark_load(req)
    return req


def _context(value: Any) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise bad_request("context must be an array of integers", "context")
    return list(value) or None

# ------------------------------------------------------------------------------------------------- chat


def parse_chat(body: Any) -> GenRequest:
    """POST /api/chat -> GenRequest (messages in the chat-template shape, tools kept once checked; Ollama
    has no tool_choice: always "auto", parallel calls allowed)."""
    req = GenRequest(model=_model(body))
    raw_messages = _field(body, "messages", list, [], "an array")
    req.messages = [_message(m, i) for i, m in enumerate(raw_messages)]
    tools = _field(body, "tools", list, None, "an array")
    if tools is not None and not all(isinstance(t, dict) for t in tools):
        raise bad_request("tools must be an array of objects", "tools")
    req.tools = [check_function_tool(t, f"tools[{i}]") for i, t in enumerate(tools)] if tools else None
    _common(body, req)
    if not req.messages:
        _mark_load(req)
    return req


def _message(raw: Any, i: int) -> dict:
    """One Ollama message -> {"role" (lower-cased), "content"} plus "thinking", "tool_calls"
    ([{"id"?, "type": "function", "function": {"name", "arguments": object}}]), "name" (from tool_name),
    "tool_call_id" where given."""
    where = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object", where)
    role, content = raw.get("role"), raw.get("content")
    if not isinstance(role, str) or not role:
        raise bad_request(f"{where}.role must be a non-empty string", f"{where}.role")
    if content is not None and not isinstance(content, str):
        raise bad_request(f"{where}.content must be a string", f"{where}.content")
    _no_images(raw.get("images"), f"{where}.images")
    msg: dict[str, Any] = {"role": role.lower(), "content": content or ""}
    for src, dst in (("thinking", "thinking"), ("tool_name", "name"), ("tool_call_id", "tool_call_id")):
        value = raw.get(src)
        if value is not None and not isinstance(value, str):
            raise bad_request(f"{where}.{src} must be a string", f"{where}.{src}")
        if value:
            msg[dst] = value
    if raw.get("tool_calls"):
        msg["tool_calls"] = _tool_calls(raw["tool_calls"], where)
    return msg


def _tool_calls(raw: Any, where: str) -> list[dict]:
    if not isinstance(raw, list):
        raise bad_request(f"{where}.tool_calls must be an array", f"{where}.tool_calls")
    return [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(raw)]


def _tool_call(raw: Any, where: str) -> dict:
    fn = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad_request(f"{where}.function.name is required", f"{where}.function.name")
    args = fn.get("arguments")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise bad_request(f"{where}.function.arguments must be an object", f"{where}.function.arguments")
    call: dict[str, Any] = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
    if isinstance(raw.get("id"), str) and raw["id"]:
        call = {"id": raw["id"], **call}
    return call

# ------------------------------------------------------------------------------------ model management


def _name(body: Any) -> str:
    """`model`, or the older alias `name`; missing -> 400 as in Ollama."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    for key in ("model", "name"):
        value = body.get(key)
        if value is not None and not isinstance(value, str):
            raise bad_request(f"{key} must be a string", key)
        if value:
            return value
    raise bad_request("model is required", "model")


def parse_show(body: Any) -> str:
    """POST /api/show -> model name (`verbose` is read by the route and passed to show_body)."""
    return _name(body)


def parse_delete(body: Any) -> str:
    """DELETE /api/delete -> model name."""
    return _name(body)


def parse_copy(body: Any) -> tuple[str, str]:
    """POST /api/copy -> (source, destination)."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    names = []
    for key in ("source", "destination"):
        value = body.get(key)
        if not value:
            raise bad_request(f"{key} is required", key)
        if not isinstance(value, str):
            raise bad_request(f"{key} must be a string", key)
        names.append(value)
    return names[0], names[1]

