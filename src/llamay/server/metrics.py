"""Counters for /metrics (Prometheus text exposition format 0.0.4): llamay's names, and llama-server's
`llamacpp:` names beside them (ref: llama.cpp tools/server/server-context.cpp, handle_metrics)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..events import Usage
from . import metrics_vllm

RECENT = 32  # generations the recent prompt gauges sum over


@dataclass
class Metrics:
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache
    disk_tokens: int = 0  # of them, read from its disk tier
    shared_tokens: int = 0  # of them, read from its shared tier
    completion_tokens: int = 0
    prompt_ns: int = 0  # time spent evaluating prompts
    eval_ns: int = 0  # time spent generating
    n_tokens_max: int = 0  # the most tokens (prompt and output) one request held
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # (prompt_tokens, cached_tokens)
    embed_tokens: int = 0  # tokens embedded (embedding routes; not in prompt_tokens)
    embed_passes: int = 0  # their forward passes
    embed_ns: int = 0  # time spent embedding

    def count_embedding(self, n_tokens: int, n_passes: int, ns: int):
        self.embed_tokens += n_tokens
        self.embed_passes += n_passes
        self.embed_ns += ns

    def count(self, usage: Usage):
        self.prompt_ns += usage.prompt_eval_ns
        self.eval_ns += usage.eval_ns
        self.n_tokens_max = max(self.n_tokens_max, usage.prompt_tokens + usage.completion_tokens)
        self.prompt_tokens += usage.prompt_tokens
        self.cached_tokens += usage.cached_tokens
        self.disk_tokens += usage.disk_tokens
        self.shared_tokens += usage.shared_tokens
        self.completion_tokens += usage.completion_tokens
        self.recent.append((usage.prompt_tokens, usage.cached_tokens))

    def render(self, registry) -> str:
        gauges = {"queue_depth": 0, "running_sequences": 0, "kv_pages_used": 0, "kv_pages_total": 0,
                  "models_loaded": len(registry.loaded)}
        for loaded in list(registry.loaded.values()):
            sched, state = loaded.scheduler, loaded.llm.kv_view()  # counters: read off the scheduler's thread
            gauges["queue_depth"] += sched.queue_depth
            gauges["running_sequences"] += sched.n_running
            gauges["kv_pages_used"] += state.n_total - state.n_free
            gauges["kv_pages_total"] += state.n_total
            for name in ("state_slots_used", "state_checkpoints", "state_checkpoint_bytes"):  # hybrid models
                if name in state.state:
                    gauges[name] = gauges.get(name, 0) + state.state[name]
        spec = {"spec_drafted_tokens_total": 0, "spec_accepted_tokens_total": 0, "spec_draft_steps_total": 0}
        for loaded in list(registry.loaded.values()):
            sched = loaded.scheduler
            spec["spec_drafted_tokens_total"] += sched.drafted_tokens
            spec["spec_accepted_tokens_total"] += sched.accepted_tokens
            spec["spec_draft_steps_total"] += sched.draft_steps
        lines = []
        for name, value, help_ in (("requests_total", self.requests, "generation requests received"),
                                   ("prompt_tokens_total", self.prompt_tokens, "prompt tokens"),
                                   ("prompt_cache_hit_tokens_total", self.cached_tokens,
                                    "prompt tokens found in the prefix cache (not evaluated)"),
                                   ("prompt_cache_memory_tokens_total",
                                    self.cached_tokens - self.disk_tokens - self.shared_tokens,
                                    "of them, found in memory"),
                                   ("prompt_cache_disk_tokens_total", self.disk_tokens,
                                    "of them, read from the disk tier"),
                                   ("prompt_cache_shared_tokens_total", self.shared_tokens,
                                    "of them, read from the shared tier (Redis / Valkey)"),
                                   ("tokens_generated_total", self.completion_tokens, "tokens generated"),
                                   ("embedding_tokens_total", self.embed_tokens,
                                    "tokens embedded (embedding routes)")):
            lines += [f"# HELP llamay_{name} {help_}", f"# TYPE llamay_{name} counter", f"llamay_{name} {value}"]
        for name, help_ in (("spec_drafted_tokens_total", "speculative draft tokens verified (loaded models)"),
                            ("spec_accepted_tokens_total", "of them, emitted: each saved a forward pass"),
                            ("spec_draft_steps_total", "forward passes that verified a draft")):
            lines += [f"# HELP llamay_{name} {help_}", f"# TYPE llamay_{name} counter", f"llamay_{name} {spec[name]}"]
        disk = {"cache_disk_pages_written_total": 0, "cache_disk_dropped_total": 0}
        for loaded in list(registry.loaded.values()):
            tiers = loaded.llm.cache
            if tiers is not None and tiers.disk is not None:
                gauges["cache_disk_bytes"] = gauges.get("cache_disk_bytes", 0) + tiers.disk.bytes
                disk["cache_disk_pages_written_total"] += tiers.pages_written["disk"]
                disk["cache_disk_dropped_total"] += tiers.disk.dropped
        for name, help_ in (("cache_disk_pages_written_total", "pages written to the disk tier (loaded models)"),
                            ("cache_disk_dropped_total", "disk tier segments dropped as torn or corrupt")):
            lines += [f"# HELP llamay_{name} {help_}", f"# TYPE llamay_{name} counter", f"llamay_{name} {disk[name]}"]
        recent = list(self.recent)
        for name, value, help_ in (("recent_prompt_tokens", sum(p for p, _ in recent),
                                    f"prompt tokens of the last {RECENT} generations"),
                                   ("recent_prompt_cache_hit_tokens", sum(c for _, c in recent),
                                    ("of them, found in the prefix cache (their ratio: the cached share of "
                                     "recent prompts)"))):
            lines += [f"# HELP llamay_{name} {help_}", f"# TYPE llamay_{name} gauge", f"llamay_{name} {value}"]
        for name, value in gauges.items():
            lines += [f"# HELP llamay_{name} {name.replace('_', ' ')}", f"# TYPE llamay_{name} gauge",
                      f"llamay_{name} {value}"]
        lines += metrics_vllm.render(registry, self.prompt_tokens, self.cached_tokens)
        steps = sum(loaded.scheduler.steps for loaded in list(registry.loaded.values()))
        return "\n".join(lines + self._llamacpp(gauges, spec, steps)) + "\n"

    def _llamacpp(self, gauges: dict, spec: dict, steps: int) -> list[str]:
        """llama-server's metrics: prompt tokens evaluated (the cached ones apart; embedded ones too, as
        llama-server counts them), tokens predicted, their seconds and rates, forward passes (n_decode_total,
        embedding passes too), requests running and queued."""
        prompt_s, eval_s = (self.prompt_ns + self.embed_ns) / 1e9, self.eval_ns / 1e9
        evaluated = self.prompt_tokens - self.cached_tokens + self.embed_tokens
        steps += self.embed_passes
        rows = (("prompt_tokens_total", "counter", evaluated, "Number of prompt tokens processed."),
                ("prompt_tokens_cached_total", "counter", self.cached_tokens,
                 "Number of prompt tokens taken from the prefix cache."),
                ("prompt_seconds_total", "counter", prompt_s, "Prompt process time"),
                ("tokens_predicted_total", "counter", self.completion_tokens, "Number of generation tokens processed."),
                ("tokens_predicted_seconds_total", "counter", eval_s, "Predict process time"),
                ("n_decode_total", "counter", steps, "Total number of forward passes."),
                ("n_tokens_max", "counter", self.n_tokens_max, "Largest observed n_tokens."),
                ("spec_decode_num_draft_tokens_total", "counter", spec["spec_drafted_tokens_total"],
                 "Draft tokens verified."),
                ("spec_decode_num_accepted_tokens_total", "counter", spec["spec_accepted_tokens_total"],
                 "Draft tokens accepted."),
                ("spec_decode_num_drafts_total", "counter", spec["spec_draft_steps_total"], "Drafts verified."),
                ("prompt_tokens_seconds", "gauge", evaluated / prompt_s if prompt_s else 0.0,
                 "Average prompt throughput in tokens/s."),
                ("predicted_tokens_seconds", "gauge", self.completion_tokens / eval_s if eval_s else 0.0,
                 "Average generation throughput in tokens/s."),
                ("requests_processing", "gauge", gauges["running_sequences"], "Number of requests processing."),
                ("requests_deferred", "gauge", gauges["queue_depth"], "Number of requests deferred."),
                ("n_busy_slots_per_decode", "gauge", gauges["running_sequences"] / steps if steps else 0.0,
                 "Average number of busy slots per forward pass."))
        out = []
        for name, kind, value, help_ in rows:
            out += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value}"]
        return out
