"""Counters for /metrics (Prometheus text exposition format 0.0.4)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..events import Usage

RECENT = 32  # generations the recent prompt gauges sum over


@dataclass
class Metrics:
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache
    disk_tokens: int = 0  # of them, read from its disk tier
    shared_tokens: int = 0  # of them, read from its shared tier
    completion_tokens: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # (prompt_tokens, cached_tokens)

    def count(self, usage: Usage):
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
                                   ("tokens_generated_total", self.completion_tokens, "tokens generated")):
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
        return "\n".join(lines) + "\n"
