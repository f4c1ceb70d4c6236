"""SGLang's native POST /generate, as the SGLang Model Gateway forwards it: {text | input_ids, sampling_params,
stream} -> GenRequest (a raw prompt), engine events -> SGLang's {text, output_ids, meta_info} (streamed as
SGLang streams it: each frame holds the text so far, then `data: [DONE]`). Errors in SGLang's shape:
{"error": {"message", "type", "code"}} (ref: sglang srt/entrypoints/http_server.py, sampling_params.py)."""
from __future__ import annotations

import time
from typing import Any

from ...events import Delta, Finish, Usage
from .base import ProtocolError, ResponseMeta, bad_request
from .openai_common import TOP_K_OFF, frame, get_bool, get_int, get_num, require_body
from .request import FRESH_SEED, GenRequest, LlamaOptions, Sampling

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
SGLANG_DEFAULTS = Sampling(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0)  # its defaults: every filter off
DONE = "data: [DONE]\n\n"
MAX_PROMPTS = 64  # prompts in one batched /generate: each becomes a sequence of its own
# sampling_params llamay runs: name -> (lo, hi) for numbers
_NUMBERS = {"temperature": (0, None), "top_p": (0, 1), "min_p": (0, 1), "frequency_penalty": (-2, 2),
            "presence_penalty": (-2, 2), "repetition_penalty": (0, None)}
# accepted at any value: they change nothing llamay does (it never trims a stop string's text, and
# skips special tokens' text as SGLang does by default)
_NO_OPS = {"skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "custom_params",
           "stream_interval"}
# top-level fields the gateway or SGLang's clients send that change nothing here
_TOP_LEVEL = {"text", "input_ids", "sampling_params", "stream", "rid", "model", "return_logprob",
              "return_text_in_logprobs", "log_metrics", "return_hidden_states", "background", "no_logs",
              "return_bytes", "return_entropy", "logprob_start_len", "top_logprobs_num", "lora_path",
              "custom_logit_processor", "bootstrap_host", "bootstrap_port", "bootstrap_room", "priority"}


def parse_generate(body: Any) -> list[GenRequest]:
    """One GenRequest per prompt (text or input_ids: one, or a batch as a list)."""
    body = require_body(body)
    unknown = sorted(set(body) - _TOP_LEVEL)
    if unknown:
        raise bad_request(f"unknown field(s) {', '.join(unknown)}", unknown[0])
    if get_bool(body, "return_logprob"):
        raise bad_request("return_logprob is not supported on /generate; use /v1/completions' logprobs",
                          "return_logprob")
    prompts = _prompts(body)
    params = body.get("sampling_params") or {}
    if isinstance(params, list):
        raise bad_request("one sampling_params object for every prompt is supported, not a list",
                          "sampling_params")
    if not isinstance(params, dict):
        raise bad_request("sampling_params must be an object", "sampling_params")
    stream = bool(get_bool(body, "stream"))
    if stream and len(prompts) > 1:
        raise bad_request("a batch of prompts cannot stream; send one prompt per streamed request", "stream")
    model = body.get("model") if isinstance(body.get("model"), str) and body.get("model") else None
    return [_request(model, p, params, stream) for p in prompts]


def _prompts(body: dict) -> list[str | list[int]]:
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise bad_request("give exactly one of text or input_ids", "text")
    field = "text" if text is not None else "input_ids"
    batch = (text if isinstance(text, list) else [text]) if text is not None else \
        (ids if isinstance(ids, list) and ids and isinstance(ids[0], list) else [ids])
    if len(batch) > MAX_PROMPTS:
        raise bad_request(f"{field} holds {len(batch)} prompts; at most {MAX_PROMPTS} in one request", field)
    if text is not None:
        if not batch or not all(isinstance(t, str) and t for t in batch):
            raise bad_request("text must be a non-empty string or a list of them", "text")
        return batch
    for one in batch:
        if not isinstance(one, list) or not one or not all(_is_id(t) for t in one):
            raise bad_request("input_ids must be a non-empty list of token ids, or a list of them", "input_ids")
    return batch


def _is_id(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0


def _request(model: str | None, prompt, params: dict, stream: bool) -> GenRequest:
    unknown = sorted(set(params) - set(_NUMBERS) - _NO_OPS - {"max_new_tokens", "top_k", "stop", "ignore_eos",
                                                             "n", "sampling_seed", "seed", "min_new_tokens"})
    if unknown:
        raise bad_request(f"sampling_params.{unknown[0]} is not supported", f"sampling_params.{unknown[0]}")
    if params.get("min_new_tokens"):
        raise bad_request("sampling_params.min_new_tokens is not supported (0 only)", "sampling_params.min_new_tokens")
    sampling: dict[str, Any] = {}
    for name, (lo, hi) in _NUMBERS.items():
        value = get_num(params, name, lo, hi)
        if value is not None:
            sampling["repeat_penalty" if name == "repetition_penalty" else name] = value
    if sampling.get("repeat_penalty") == 0:
        raise bad_request("'repetition_penalty' must be > 0", "repetition_penalty")
    top_k = get_int(params, "top_k", TOP_K_OFF)
    if top_k is not None:
        sampling["top_k"] = max(top_k, 0)
    seed = get_int(params, "sampling_seed")
    seed = get_int(params, "seed") if seed is None else seed
    if seed is not None:
        sampling["seed"] = seed if seed >= 0 else FRESH_SEED
    max_new = get_int(params, "max_new_tokens", 0)
    return GenRequest(model=model, prompt=prompt, raw=True, stream=stream, n=get_int(params, "n", 1, 16) or 1,
                      stop=_stop(params.get("stop")), sampling=Sampling(**sampling), sampling_defaults=SGLANG_DEFAULTS,
                      max_tokens=DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new,
                      llama=LlamaOptions(ignore_eos=bool(get_bool(params, "ignore_eos"))))


def _stop(stop: Any) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad_request("sampling_params.stop must be a string or a list of strings", "sampling_params.stop")
    return [s for s in stops if s]


def error_body(err: ProtocolError) -> dict:
    return {"error": {"message": err.message, "type": _TYPES.get(err.status, "BadRequestError"), "code": err.status}}


_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 409: "BadRequestError",
          429: "RateLimitError", 500: "InternalServerError", 501: "NotImplementedError", 503: "ServiceUnavailable"}


class GenerateOutput:
    """Engine events -> SGLang /generate results: one per choice (n > 1 gives a list, as SGLang does); a
    stream sends each choice's text so far and its tokens so far in every frame, then [DONE]."""

    def __init__(self, req: GenRequest, meta: ResponseMeta, usage: Usage):
        self.req, self.meta, self.prompt = req, meta, usage
        self.text = [""] * req.n
        self.ids: list[list[int]] = [[] for _ in range(req.n)]
        self.finish: list[Finish | None] = [None] * req.n
        self.t0 = time.monotonic()

    def feed(self, ev: Delta | Finish) -> list[str]:
        if isinstance(ev, Finish):
            self.finish[ev.index] = ev
        else:
            self.text[ev.index] += ev.reasoning + ev.content
            self.ids[ev.index] += ev.tokens
        return [frame(self.result(ev.index))] if self.req.stream else []

    def end(self) -> list[str]:
        return [DONE] if self.req.stream else []

    def fail(self, err: ProtocolError) -> list[str]:
        return [frame(error_body(err)), DONE]

    def body(self) -> dict | list:
        results = [self.result(i) for i in range(self.req.n)]
        return results[0] if self.req.n == 1 else results

    def result(self, i: int) -> dict:
        fin = self.finish[i]
        usage = fin.usage if fin else self.prompt
        meta = {"id": self.meta.id if self.req.n == 1 else f"{self.meta.id}_{i}",
                "finish_reason": _finish_reason(fin, len(self.ids[i])), "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": len(self.ids[i]), "cached_tokens": usage.cached_tokens,
                "e2e_latency": time.monotonic() - self.t0}
        return {"text": self.text[i], "output_ids": list(self.ids[i]), "meta_info": meta}


def _finish_reason(fin: Finish | None, n_tokens: int) -> dict | None:
    if fin is None:
        return None
    if fin.reason == "length":
        return {"type": "length", "length": n_tokens}
    return {"type": "stop", "matched": fin.stop_sequence if fin.stop_sequence is not None else
            (fin.context[-1] if fin.context else None)}
