"""llama-server's native responses: /completion and /infill results (whole, or streamed as `data: {...}`
events with no [DONE]), generation_settings, /props and /slots bodies (ref: llama.cpp
tools/server/server-task.cpp to_json_non_oaicompat, task_params::to_json; llama-server.md §2)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from ...engine.sampling import SamplingParams
from ...events import Delta, Finish, Progress, TokenLogprob, Usage
from .base import ProtocolError, ResponseMeta
from .llamacpp_params import RANDOM_SEED, RUN_ORDER
from .openai_common import frame
from .request import GenRequest
from .timings import BUILD_INFO, chunk_timings, progress_fields, timings_body

STOP_TYPES = {"stop": "eos", "length": "limit"}  # a stop string makes it "word"
# generation_settings of the samplers llamay does not run: each at its off value (llama.cpp's defaults)
OFF_SETTINGS = {"dynatemp_range": 0.0, "dynatemp_exponent": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0,
                "xtc_threshold": 0.1, "typical_p": 1.0, "dry_multiplier": 0.0, "dry_base": 1.75,
                "dry_allowed_length": 2, "dry_penalty_last_n": -1, "mirostat": 0, "mirostat_tau": 5.0,
                "mirostat_eta": 0.1, "n_keep": 0, "n_discard": 0, "min_keep": 0, "timings_per_token": False,
                "post_sampling_probs": False, "lora": []}


@dataclass
class ModelView:
    """What the native bodies show of the model serving them."""
    name: str
    path: str
    n_ctx: int
    chat_template: str
    bos_token: str
    eos_token: str
    detokenize: Callable[[list[int]], str]  # special tokens as their text
    eog_ids: tuple[int, ...] = ()  # end-of-generation tokens (what ignore_eos bans)


def error_object(err: ProtocolError) -> dict:
    """llama-server's {code, message, type} (plus n_prompt_tokens and n_ctx for a prompt over the context, whose
    message starts as llama-server's, which clients match)."""
    message = f"{CONTEXT_MESSAGE}: {err.message}" if err.kind == "context_length" else err.message
    return {"code": err.status, "message": message, "type": ERROR_TYPES.get(err.kind, "server_error"), **err.detail}


CONTEXT_MESSAGE = "the request exceeds the available context size, try increasing it"


ERROR_TYPES = {"invalid_request": "invalid_request_error", "not_found": "not_found_error",
               "context_length": "exceed_context_size_error", "authentication": "authentication_error",
               "permission": "permission_error", "not_supported": "not_supported_error",
               "overloaded": "unavailable_error", "rate_limit": "unavailable_error", "internal": "server_error"}


def error_body(err: ProtocolError) -> dict:
    return {"error": error_object(err)}


def generation_settings(req: GenRequest, n_ctx: int, model: str, eog_ids: tuple[int, ...] = ()) -> dict:
    """The settings a request ran with, in llama-server's names (its defaults where the request set none);
    logit_bias as llama-server lists it: [{token, bias}], -inf as null, ignore_eos's bans of eog_ids too."""
    s = {**dataclasses.asdict(SamplingParams()), **req.run_sampling().given()}
    n_predict = -1 if req.max_tokens is None else req.max_tokens
    return {"n_ctx": n_ctx, "model": model, "n_predict": n_predict, "max_tokens": n_predict,
            "seed": RANDOM_SEED if s["seed"] is None or s["seed"] < 0 else s["seed"], "temperature": s["temperature"],
            "top_k": s["top_k"], "top_p": s["top_p"], "min_p": s["min_p"], "repeat_last_n": s["repeat_last_n"],
            "repeat_penalty": s["repeat_penalty"], "presence_penalty": s["presence_penalty"],
            "frequency_penalty": s["frequency_penalty"], "stop": list(req.stop),
            "ignore_eos": req.llama.ignore_eos, "stream": req.stream,
            "n_probs": req.top_logprobs if req.logprobs else 0, "grammar": req.llama.grammar or "",
            "samplers": list(RUN_ORDER), "reasoning_format": req.chat.reasoning_format or "auto",
            "logit_bias": _logit_bias(req, eog_ids), **OFF_SETTINGS}


def _logit_bias(req: GenRequest, eog_ids: tuple[int, ...]) -> list[dict]:
    bias = {**(req.run_sampling().logit_bias or {}),
            **{k: v for k, v in req.llama.logit_bias if isinstance(k, int)}}
    if req.llama.ignore_eos:
        bias.update(dict.fromkeys(eog_ids, -math.inf))
    return [{"bias": None if math.isinf(v) else v, "token": t} for t, v in bias.items()]


def probs_entry(t: TokenLogprob, post_sampling: bool = False) -> dict:
    """One generated token of completion_probabilities, with its top alternatives; post_sampling (the
    distribution drawn from): as probabilities, `prob` and `top_probs`, those of probability 0 left out."""
    if post_sampling:
        top = [{"id": x.id, "token": x.token, "bytes": x.bytes, "prob": math.exp(x.logprob)} for x in t.top]
        return {"id": t.id, "token": t.token, "bytes": t.bytes, "prob": math.exp(t.logprob),
                "top_probs": [x for x in top if x["prob"] > 0]}
    return {"id": t.id, "token": t.token, "bytes": t.bytes, "logprob": t.logprob,
            "top_logprobs": [{"id": x.id, "token": x.token, "bytes": x.bytes, "logprob": x.logprob} for x in t.top]}


@dataclass
class _Choice:
    text: list[str] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)
    probs: list[TokenLogprob] = dataclasses.field(default_factory=list)
    finish: Finish | None = None


class CompletionOutput:
    """Engine events -> /completion results: one object per choice (a list when n > 1, numbered from
    first_index). A raw completion has no reasoning channel: reasoning text goes into content."""

    def __init__(self, req: GenRequest, meta: ResponseMeta, prompt: Usage, model: ModelView, first_index: int = 0):
        self.req, self.meta, self.model, self.first = req, meta, model, first_index
        self.n_prompt = prompt.prompt_tokens
        self.choices = [_Choice() for _ in range(req.n)]

    def feed(self, ev: Delta | Finish | Progress) -> list[str]:
        if isinstance(ev, Progress):
            return [frame(self._part(0, "", [], 0, progress_fields(self.req, ev)))] if self.req.stream else []
        choice = self.choices[ev.index]
        if isinstance(ev, Finish):
            choice.finish = ev
            return [frame(self._result(ev.index, streamed=True))] if self.req.stream else []
        text = ev.reasoning + ev.content
        choice.text.append(text)
        choice.tokens += ev.tokens
        choice.probs += ev.logprobs
        if not self.req.stream or not (text or ev.tokens):
            return []
        part = self._part(ev.index, text, ev.tokens, len(choice.tokens), chunk_timings(ev.usage))
        if self.req.logprobs:
            part["completion_probabilities"] = [probs_entry(t, self.req.llama.post_sampling_probs) for t in ev.logprobs]
        return [frame(part)]

    def _part(self, i: int, text: str, tokens: list[int], n_predicted: int, extra: dict) -> dict:
        """A streamed partial result of choice i (llama-server's to_json_non_oaicompat)."""
        return {"index": self.first + i, "content": text, "tokens": tokens, "stop": False, "id_slot": self.meta.slot,
                "tokens_predicted": n_predicted, "tokens_evaluated": self.n_prompt, **extra}

    def end(self) -> list[str]:
        return []

    def body(self) -> dict | list:
        results = self.results()
        return results[0] if len(results) == 1 else results

    def results(self) -> list[dict]:
        return [self._result(i, streamed=False) for i in range(self.req.n)]

    def fail(self, err: ProtocolError) -> list[str]:
        return [frame(error_body(err))]

    def _result(self, i: int, streamed: bool) -> dict:
        """The last event of a choice (streamed: its text and tokens already sent) or its whole result."""
        choice, req = self.choices[i], self.req
        finish, usage = choice.finish, choice.finish.usage
        text = "".join(choice.text)
        out = {"index": self.first + i, "content": "" if streamed else text,
               "tokens": [] if streamed or not req.llama.return_tokens else choice.tokens,
               "id_slot": self.meta.slot, "stop": True, "model": self.meta.model,
               "tokens_predicted": usage.completion_tokens, "tokens_evaluated": usage.prompt_tokens,
               "generation_settings": generation_settings(req, self.model.n_ctx, self.meta.model,
                                                          self.model.eog_ids),
               "prompt": self.model.detokenize((finish.context or [])[:usage.prompt_tokens]),
               "has_new_line": "\n" in text, "truncated": False,
               "stop_type": "word" if finish.stop_sequence else STOP_TYPES.get(finish.reason, "eos"),
               "stopping_word": finish.stop_sequence or "",
               "tokens_cached": usage.prompt_tokens + usage.completion_tokens, "timings": timings_body(usage)}
        if req.logprobs and not streamed:
            out["completion_probabilities"] = [probs_entry(t, req.llama.post_sampling_probs) for t in choice.probs]
        return pick_fields(out, req.llama.response_fields)


def pick_fields(body: dict, fields: tuple[str, ...]) -> dict:
    """response_fields: only these, a/b naming b inside a, moved to the top under the name "a/b"."""
    if not fields:
        return body
    out = {}
    for name in fields:
        value, found = body, True
        for part in name.split("/"):
            found = isinstance(value, dict) and part in value
            if not found:
                break
            value = value[part]
        if found:
            out[name] = value
    return out


def props_body(model: ModelView, defaults: GenRequest, total_slots: int) -> dict:
    """GET /props: the server's default generation settings and what it serves."""
    return {"default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": model.n_ctx, "speculative": False,
                                            "is_processing": False,
                                            "params": generation_settings(defaults, model.n_ctx, model.name),
                                            "prompt": ""},
            "total_slots": total_slots, "model_alias": model.name, "model_path": model.path,
            "modalities": {"vision": False, "video": False, "audio": False}, "chat_template": model.chat_template,
            "chat_template_caps": {}, "bos_token": model.bos_token, "eos_token": model.eos_token,
            "build_info": BUILD_INFO, "is_sleeping": False, "endpoint_slots": True, "endpoint_props": False,
            "endpoint_metrics": True}


def slot_body(slot, n_ctx: int, model: str) -> dict:
    """One entry of GET /slots (slot: a server.slots.Slot); params and counts once it served a request."""
    body = {"id": slot.id, "n_ctx": n_ctx, "speculative": False, "is_processing": slot.busy > 0}
    if slot.req is None or slot.last is None:
        return body
    usage, limit = slot.last.usage, slot.req.max_tokens
    return {**body, "id_task": slot.task, "n_prompt_tokens": usage.prompt_tokens,
            "n_prompt_tokens_processed": usage.prompt_eval_count, "n_prompt_tokens_cache": usage.cached_tokens,
            "params": generation_settings(slot.req, n_ctx, model),
            "next_token": [_next_token(slot.busy > 0, usage.completion_tokens, limit)]}


def _next_token(busy: bool, n_decoded: int, limit: int | None) -> dict:
    """An idle slot has no budget left over from the task it finished: n_decoded 0, n_remain -1."""
    if not busy:
        return {"has_next_token": False, "n_decoded": 0, "n_remain": -1}
    return {"has_next_token": True, "n_decoded": n_decoded, "n_remain": -1 if limit is None else limit - n_decoded}
