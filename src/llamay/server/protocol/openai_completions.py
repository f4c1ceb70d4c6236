"""POST /v1/completions (legacy text completion): body -> GenRequest (raw prompt), engine events ->
text_completion body or chunks (ref: ../shared/docs/protocols/openai.md §2)."""
from __future__ import annotations

import dataclasses
from typing import Any

from ...events import Delta, Finish, Progress, TokenLogprob
from .base import ResponseMeta, bad_request
from .llamacpp_params import parse_extras
from .openai_common import (
    DONE,
    FINISH_REASONS,
    OPENAI_DEFAULTS,
    ChoicesOutput,
    frame,
    get_bool,
    get_int,
    get_str,
    parse_max_tokens,
    parse_n,
    parse_sampling,
    parse_stop,
    parse_stream,
    require_body,
    optional_model,
    usage_body,
)
from .request import GenRequest, Sampling
from .timings import chunk_timings, progress_fields

from .openai_chat import parse_response_format

MAX_LOGPROBS = 5  # the legacy API's limit on `logprobs` alternatives


def parse_completion(body: Any) -> GenRequest:
    """max_tokens left unset means until end of generation (llama-server's n_predict -1), not OpenAI's
    16: local users send long prompts without it and expect a full answer."""
    body = require_body(body)
    model = optional_model(body)
    stream, include_usage = parse_stream(body)
    n = parse_n(body)
    best_of = get_int(body, "best_of", 1)
    if best_of is not None and best_of > n:
        raise bad_request("'best_of' (server-side candidates) is not supported; use 'n' instead", "best_of")
    top = get_int(body, "logprobs", 0, MAX_LOGPROBS)
    extra_sampling, llama = parse_extras(body)
    llama = dataclasses.replace(llama, grammar=get_str(body, "grammar") or None)  # llama-server's GBNF field
    return GenRequest(
        model=model, prompt=parse_prompt(body.get("prompt")), raw=True, suffix=get_str(body, "suffix"),
        echo=bool(get_bool(body, "echo")), stream=stream, include_usage=include_usage, n=n,
        stop=parse_stop(body), max_tokens=parse_max_tokens(body, "max_tokens"),
        sampling=Sampling(**{**parse_sampling(body), **extra_sampling}), sampling_defaults=OPENAI_DEFAULTS,
        logprobs=top is not None, top_logprobs=top or 0, format=parse_response_format(body), llama=llama)


def parse_prompt(prompt: Any) -> str | list[int]:
    """A string, a list of one string, token ids, or a list of one token-id list; one prompt only."""
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):
        raise bad_request(f"'prompt' holds {len(prompt)} prompts: batches are not supported, "
                          "send one prompt per request (use 'n' for several completions)", "prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        raise bad_request("'prompt' is required: a string or an array of token ids", "prompt")
    if not prompt or min(prompt) < 0:
        raise bad_request("'prompt' token ids must be a non-empty array of non-negative integers", "prompt")
    return prompt


def completion_logprobs(tokens: list[TokenLogprob], offset: int) -> dict:
    """The legacy shape. text_offset: each token's character offset in the choice's text, counted
    from `offset` (the text before these tokens) by the tokens' own text."""
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    return {"tokens": [t.token for t in tokens], "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [_top_dict(t) for t in tokens], "text_offset": offsets}


def _top_dict(t: TokenLogprob) -> dict[str, float]:
    top: dict[str, float] = {}
    for x in t.top:  # two tokens with the same text share one key: keep the likelier (listed first)
        top.setdefault(x.token, x.logprob)
    return top


class CompletionOutput(ChoicesOutput):
    """Engine events -> text_completion body or chunks (same object type), then the usage chunk
    (include_usage) and [DONE]. A raw completion has no reasoning channel: any text the engine
    labelled reasoning is model text and goes into `text` before the content. A stream that asked has an
    empty chunk with `prompt_progress` per Progress event and `timings` on every chunk (llama-server's)."""

    def __init__(self, req: GenRequest, meta: ResponseMeta):
        super().__init__(req, meta)
        self._chars = [0] * req.n  # characters of text sent so far per choice (for text_offset)

    def feed(self, ev: Delta | Finish | Progress) -> list[str]:
        if isinstance(ev, Progress):
            return [self._chunk(0, "", None, None, progress_fields(self.req, ev))] if self.req.stream else []
        state = self.record(ev)
        if isinstance(ev, Finish):
            return [self._chunk(ev.index, "", None, FINISH_REASONS[ev.reason])] if self.req.stream else []
        text = ev.reasoning + ev.content
        logprobs = completion_logprobs(ev.logprobs, self._chars[ev.index]) if ev.logprobs else None
        if logprobs is not None:
            state.offsets.extend(logprobs["text_offset"])
        self._chars[ev.index] += len(text)
        if not self.req.stream or not (text or logprobs):
            return []
        return [self._chunk(ev.index, text, logprobs, None, chunk_timings(ev.usage))]

    def end(self) -> list[str]:
        if not self.req.stream:
            return []
        if self.req.include_usage:
            return [frame({**self._head(), "choices": [], "usage": usage_body(self.usage())}), DONE]
        return [DONE]

    def body(self) -> dict:
        usage = self.usage()
        return {**self._head(), "choices": [self._choice_body(i) for i in range(self.req.n)],
                "usage": usage_body(usage)}

    def _choice_body(self, i: int) -> dict:
        state = self.choices[i]
        logprobs = None
        if self.req.logprobs:
            logprobs = completion_logprobs(state.logprobs, 0)
            logprobs["text_offset"] = state.offsets
        text = "".join(r + c for r, c in zip(state.reasoning, state.content))
        return {"text": text, "index": i, "logprobs": logprobs, "finish_reason": FINISH_REASONS[state.finish.reason]}

    def _head(self) -> dict:
        return {"id": self.meta.id, "object": "text_completion", "created": self.meta.created,
                "model": self.meta.model}

    def _chunk(self, index: int, text: str, logprobs: dict | None, finish_reason: str | None,
               extra: dict | None = None) -> str:
        chunk = {**self._head(), "choices": [{"text": text, "index": index, "logprobs": logprobs,
                                              "finish_reason": finish_reason}], **(extra or {})}
        if self.req.include_usage:
            chunk["usage"] = None
        return frame(chunk)
