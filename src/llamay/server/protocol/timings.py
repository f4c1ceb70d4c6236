"""llama-server's `timings` object (its native responses and OpenAI chat ones), its stream telemetry
(`prompt_progress`, per-chunk `timings`) and the build id it reports (ref: llama.cpp
tools/server/server-common.cpp server_slot_stats::to_json, server-task.cpp result_prompt_progress)."""
from __future__ import annotations

from llamay import __version__

from ...events import Progress, Usage
from .request import GenRequest

BUILD_INFO = f"llamay-{__version__}"  # /props build_info and OpenAI system_fingerprint


def timings_body(usage: Usage) -> dict:
    """cache_n: prompt tokens found computed; prompt_n: those evaluated; predicted_n: tokens generated;
    draft_n / draft_n_accepted (when drafts were verified): speculative tokens checked / emitted;
    cache_n_disk / cache_n_shared (when either tier served some): of cache_n, those read from the disk and
    the shared tier. Rates are 0 where nothing was timed; the generation rate is over the decode steps, one
    fewer than the tokens (the first comes from the prompt's logits, timed in prompt_ms), as llama-server's."""
    prompt_n = usage.prompt_eval_count
    prompt_ms, predicted_ms = usage.prompt_eval_ns / 1e6, usage.eval_ns / 1e6
    return {"cache_n": usage.cached_tokens,
            "prompt_n": prompt_n, "prompt_ms": prompt_ms, "prompt_per_token_ms": _ratio(prompt_ms, prompt_n),
            "prompt_per_second": _ratio(1e3 * prompt_n, prompt_ms),
            "predicted_n": usage.completion_tokens, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": _ratio(predicted_ms, max(usage.completion_tokens - 1, 0)),
            "predicted_per_second": _ratio(1e3 * max(usage.completion_tokens - 1, 0), predicted_ms),
            **({"draft_n": usage.drafted_tokens, "draft_n_accepted": usage.accepted_tokens}
               if usage.drafted_tokens else {}),
            **({"cache_n_disk": usage.disk_tokens, "cache_n_shared": usage.shared_tokens}
               if usage.disk_tokens or usage.shared_tokens else {})}


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def progress_fields(req: GenRequest, ev: Progress) -> dict:
    """A progress chunk's own fields: prompt_progress {total, cache, processed, time_ms}, and the timings so
    far when the request asked for them on every chunk."""
    progress = {"total": ev.total, "cache": ev.cached, "processed": ev.processed, "time_ms": ev.prompt_ns // 10**6}
    timings = {"timings": timings_body(ev.usage())} if req.llama.timings_per_token else {}
    return {"prompt_progress": progress, **timings}


def chunk_timings(usage: Usage | None) -> dict:
    """A streamed chunk's `timings` (a Delta's usage so far, set when the request asked for timings_per_token)."""
    return {"timings": timings_body(usage)} if usage is not None else {}
