"""vLLM's render answer (POST /v1/chat/completions/render, /v1/completions/render, /v1/responses/render): the
GenerateRequest a token-in engine would run, {request_id, token_ids, sampling_params, model, ...}; vllm-router
places a request by its token_ids (ref: vLLM entrypoints/scale_out/token_in_token_out/protocol.py
GenerateRequest, render/api_router.py; sampling_params under vllm.SamplingParams' names)."""
from __future__ import annotations

from ...engine.sampling import SamplingParams
from .request import GenRequest


def generate_request(req: GenRequest, ids: list[int], params: SamplingParams, model: str, n_ctx: int,
                     request_id: str) -> dict:
    """The prompt's token ids as the request would run them, with the sampling it would run under (params:
    every default applied). What vLLM leaves empty for a text prompt is empty."""
    return {"request_id": request_id, "token_ids": ids, "assistant_tokens_mask": None, "token_offsets": None,
            "features": None, "sampling_params": sampling_params(req, params, n_ctx - len(ids)), "model": model,
            "stream": req.stream, "stream_options": {"include_usage": req.include_usage} if req.stream else None,
            "cache_salt": None, "priority": 0, "kv_transfer_params": None}


def sampling_params(req: GenRequest, params: SamplingParams, room: int) -> dict:
    """vllm.SamplingParams' fields (top_k 0 is off in both); max_tokens at most the room the context leaves."""
    return {"n": req.n, "presence_penalty": params.presence_penalty, "frequency_penalty": params.frequency_penalty,
            "repetition_penalty": params.repeat_penalty, "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k, "min_p": params.min_p, "seed": params.seed, "stop": list(req.stop),
            "stop_token_ids": [], "ignore_eos": req.llama.ignore_eos,
            "max_tokens": room if req.max_tokens is None else min(req.max_tokens, room), "min_tokens": 0,
            "logprobs": req.top_logprobs if req.logprobs else None, "prompt_logprobs": None,
            "skip_special_tokens": True}
