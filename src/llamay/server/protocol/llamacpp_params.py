"""llama-server's request fields beyond OpenAI's (ref: llama.cpp tools/server/server-schema.cpp and
../shared/docs/protocols/llama-server.md §2-3): prompt shapes, its sampling knobs, the knobs llamay does not
run (accepted at the value that turns them off, refused otherwise), `samplers`, its logit_bias forms.
Shared by the native routes and the OpenAI routes llama-server extends. JSON null counts as not sent."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ...engine.draft import MODES as DRAFT_MODES
from .base import bad_request
from .openai_common import NUMBER, get_bool, get_field, get_int, get_num
from .request import FRESH_SEED, LlamaOptions

Prompt = str | list  # text, token ids, or a mix of both (llama-server's tokenize_mixed)
RANDOM_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: like -1, a fresh seed

# Knobs of samplers llamay does not run: name -> (is it off?, the value that turns it off). A sampler a
# second knob turns off counts as off too (XTC above threshold 0.5, DRY over 0 tokens).
_OFF: dict[str, tuple[Callable[[Any, dict], bool], str]] = {
    "mirostat": (lambda v, b: v == 0, "0"),
    "typical_p": (lambda v, b: v >= 1, "1.0"),
    "top_n_sigma": (lambda v, b: v < 0, "-1"),
    "dynatemp_range": (lambda v, b: v <= 0, "0"),
    "xtc_probability": (lambda v, b: v <= 0 or (get_num(b, "xtc_threshold") or 0.1) > 0.5, "0"),
    "dry_multiplier": (lambda v, b: v <= 0 or b.get("dry_penalty_last_n") == 0, "0"),
    "adaptive_target": (lambda v, b: v < 0, "-1"),
    "min_keep": (lambda v, b: v <= 1, "0"),  # every filter here keeps at least one token
    "n_indent": (lambda v, b: v <= 0, "0"),
    "t_max_predict_ms": (lambda v, b: v <= 0, "0"),
    "reasoning_budget_tokens": (lambda v, b: v < 0, "-1"),
}
_OFF_FLAGS = ("grammar_lazy", "reasoning_control")

# `samplers`: llama.cpp's names (and its aliases) -> canonical; the chars form by llama.cpp's letters
_SAMPLER_NAMES = {"dry": "dry", "top_k": "top_k", "top_p": "top_p", "top_n_sigma": "top_n_sigma",
                  "typ_p": "typ_p", "min_p": "min_p", "temperature": "temperature", "xtc": "xtc",
                  "infill": "infill", "penalties": "penalties", "adaptive_p": "adaptive_p",
                  "nucleus": "top_p", "temp": "temperature", "typ": "typ_p"}
_SAMPLER_NAMES |= {k.replace("_", sep): v for k, v in list(_SAMPLER_NAMES.items()) if "_" in k for sep in ("-", "")}
_SAMPLER_CHARS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
                  "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}
RUN_ORDER = ("penalties", "top_k", "top_p", "min_p", "temperature")  # engine/sampling.py's chain
# what leaving one of them out of `samplers` means: its sampler does not run
_SAMPLER_OFF = {"penalties": {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0},
                "top_k": {"top_k": 0}, "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0},
                "temperature": {"temperature": 1.0}}  # no temperature sampler: llama.cpp draws from the logits


def check_off(body: dict) -> None:
    """400 for a knob of a sampler (or a feature) llamay does not run set to anything but off."""
    for name, (is_off, off) in _OFF.items():
        value = get_num(body, name)
        if value is not None and not is_off(value, body):
            raise bad_request(f"'{name}' is not supported by this server: leave it out or set it to {off}, "
                              f"got {body[name]!r}", name)
    for name in _OFF_FLAGS:
        if get_bool(body, name):
            raise bad_request(f"'{name}' is not supported by this server: leave it out or set it to false", name)


def parse_samplers(body: dict) -> dict[str, Any]:
    """`samplers` (names or llama.cpp's letters) -> the SamplingParams fields that turn off the samplers it
    leaves out. The ones llamay runs must come in its order; infill and unknown names are refused."""
    raw = get_field(body, "samplers", (list, str), "an array of sampler names or a string of sampler letters")
    if raw is None:
        return {}
    table = _SAMPLER_CHARS if isinstance(raw, str) else _SAMPLER_NAMES
    names = [table.get(x) if isinstance(x, str) else None for x in raw]
    if None in names or "infill" in names or len(set(names)) != len(names):
        known = ", ".join(sorted(set(table.values()) - {"infill"}))
        raise bad_request(f"'samplers' must name each sampler at most once, from {known}; got {raw!r}", "samplers")
    ours = [n for n in names if n in RUN_ORDER]
    if ours != [n for n in RUN_ORDER if n in ours]:
        raise bad_request(f"'samplers': this server applies {', '.join(RUN_ORDER)} in that order, got {raw!r}",
                          "samplers")
    return {k: v for n in RUN_ORDER if n not in ours for k, v in _SAMPLER_OFF[n].items()}


def parse_extras(body: dict) -> tuple[dict[str, Any], LlamaOptions]:
    """The llama-server fields its routes take beside OpenAI's -> (Sampling fields, LlamaOptions):
    repeat_last_n, samplers, ignore_eos, id_slot, lora, spec, verbose, the stream's telemetry
    (timings_per_token, return_progress), post_sampling_probs; cache_prompt and backend_sampling are
    accepted (the prefix cache is always on, and a hit gives the same tokens as a miss; sampling runs where
    it runs, with the same result), after check_off."""
    check_off(body)
    get_bool(body, "cache_prompt")
    get_bool(body, "backend_sampling")
    sampling = parse_samplers(body)
    repeat_last_n = get_int(body, "repeat_last_n", -1)  # -1: the whole history
    if repeat_last_n is not None:
        sampling["repeat_last_n"] = repeat_last_n
    ignore_eos, id_slot, lora = bool(get_bool(body, "ignore_eos")), get_int(body, "id_slot", -1), parse_lora(body)
    return sampling, LlamaOptions(id_slot=None if id_slot in (None, -1) else id_slot, ignore_eos=ignore_eos,
                                  lora=None if lora is None else tuple(lora), spec=parse_speculation(body),
                                  verbose=get_bool(body, "verbose"), **parse_telemetry(body),
                                  post_sampling_probs=bool(get_bool(body, "post_sampling_probs")))


def parse_telemetry(body: dict) -> dict[str, bool]:
    """What a stream reports beside the output (LlamaOptions fields): timings_per_token, return_progress."""
    return {name: bool(get_bool(body, name)) for name in ("timings_per_token", "return_progress")}


def parse_speculation(body: dict) -> str | None:
    """This request's speculative decoding: llamay's `spec` (engine/draft.py MODES), or llama-server's
    `speculative.n_max` (0: none); None: the server's. It changes no token, only the speed."""
    spec = get_field(body, "spec", (str,), "one of " + ", ".join(DRAFT_MODES))
    if spec is not None and spec not in DRAFT_MODES:
        raise bad_request(f"'spec' must be one of {', '.join(DRAFT_MODES)}, got {spec!r}", "spec")
    n_max = get_int(body, "speculative.n_max", 0)
    return spec or ("none" if n_max == 0 else None)


def parse_lora(body: dict) -> list[tuple[int, float]] | None:
    """`lora`: [{id, scale}], the adapters of this request (ids as GET /lora-adapters lists them; an adapter
    left out does not apply, as in llama-server)."""
    raw = get_field(body, "lora", (list,), "an array of {id, scale}")
    if raw is None:
        return None
    pairs = []
    for e in raw:
        i, scale = (e.get("id"), e.get("scale")) if isinstance(e, dict) else (None, None)
        if isinstance(i, bool) or not isinstance(i, int) or isinstance(scale, bool) or \
                not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise bad_request('\'lora\' must be an array of {"id": N, "scale": S} (S a finite number)', "lora")
        pairs.append((i, float(scale)))
    return pairs


def parse_sampling(body: dict) -> dict[str, Any]:
    """llama-server's own sampling fields (/completion, /infill) -> SamplingParams fields, those sent only;
    out-of-range values are clamped as llama-server does (temperature >= 0, top_k >= 0, top_p and min_p
    in [0, 1])."""
    sampling: dict[str, Any] = {}
    for name, lo, hi in (("temperature", 0.0, math.inf), ("top_p", 0.0, 1.0), ("min_p", 0.0, 1.0),
                         ("repeat_penalty", None, None), ("presence_penalty", None, None),
                         ("frequency_penalty", None, None)):
        value = get_num(body, name)
        if value is not None:
            sampling[name] = value if lo is None else min(max(value, lo), hi)
    top_k = get_int(body, "top_k")
    if top_k is not None:
        sampling["top_k"] = max(top_k, 0)
    seed = get_int(body, "seed")
    if seed is not None:  # -1 (or llama.cpp's 0xFFFFFFFF): a fresh one
        sampling["seed"] = FRESH_SEED if seed < 0 or seed == RANDOM_SEED else seed
    return sampling


def parse_logit_bias(body: dict) -> list[tuple[int | str, float]]:
    """llama-server's forms: [[token id or text, bias], ...] or {"token id or text": bias}; bias a number
    or false (a ban: -inf) -> (token id or text, bias) pairs (a text biases each of its tokens)."""
    raw = body.get("logit_bias")
    if raw is None:
        return []
    if isinstance(raw, dict):
        pairs = [(_key(k), v) for k, v in raw.items()]
    elif isinstance(raw, list) and all(isinstance(p, list) and len(p) == 2 for p in raw):
        pairs = [tuple(p) for p in raw]
    else:
        raise bad_request("'logit_bias' must be [[token, bias], ...] or {\"token\": bias}", "logit_bias")
    out = []
    for key, value in pairs:
        if value is False:
            bias = -math.inf
        elif isinstance(value, NUMBER) and not isinstance(value, bool):
            bias = float(value)
        else:
            raise bad_request(f"'logit_bias' values must be numbers or false, got {value!r}", "logit_bias")
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise bad_request(f"'logit_bias' tokens must be ids or text, got {key!r}", "logit_bias")
        out.append((key, bias))
    return out


def _key(key: str) -> int | str:
    """An object key: a token id when it is all digits (strtol's full match), else text."""
    return int(key) if key.isascii() and key.strip().lstrip("+-").isdigit() else key


def parse_n_probs(body: dict, limit: int) -> int:
    """n_probs (alias logprobs as a number): the top tokens reported per generated token."""
    for name in ("n_probs", "logprobs"):
        if isinstance(body.get(name), bool):
            continue
        value = get_int(body, name, 0, limit)
        if value is not None:
            return value
    return 0


def parse_prompts(value: Any, param: str = "prompt") -> list[Prompt]:
    """llama-server's prompt shapes: a string, token ids, a mix of both, {"prompt_string": ...}, or an
    array of those (several prompts; an array holding a number is one mixed prompt)."""
    if isinstance(value, list) and value and not any(_is_id(x) for x in value):
        return [_subprompt(x, param) for x in value]
    return [_subprompt(value, param)]


def _subprompt(value: Any, param: str) -> Prompt:
    if isinstance(value, dict) and "prompt_string" in value:
        if value.get("multimodal_data"):
            raise bad_request("multimodal data provided, but this server has no vision or audio input", param)
        value = value["prompt_string"]
    if value == []:
        raise bad_request(f"'{param}' must not be empty", param)
    return parse_mixed(value, param, "an object with a prompt_string, or an array of those")


def parse_mixed(value: Any, param: str, more: str = "") -> Prompt:
    """One text, or a list mixing texts and token ids (ids non-negative)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(_is_id(x) or isinstance(x, str) for x in value):
        if any(_is_id(x) and x < 0 for x in value):
            raise bad_request(f"'{param}' token ids must be non-negative", param)
        return list(value)
    raise bad_request(f"'{param}' must be a string, a list of tokens, a list of strings and tokens"
                      f"{', ' + more if more else ''}", param)


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def mixed_ids(prompt: Prompt, encode: Callable[[str, bool], list[int]]) -> list[int]:
    """A prompt's ids: text pieces through encode(text, add_special), BOS-style specials only for a
    first piece that is text (ref: llama.cpp tokenize_mixed)."""
    if isinstance(prompt, str):
        return encode(prompt, True)
    out: list[int] = []
    for i, piece in enumerate(prompt):
        out += encode(piece, i == 0) if isinstance(piece, str) else [piece]
    return out
