"""vLLM's metric names beside llamay's own on /metrics, for Kubernetes gateways that score endpoints by them
(llm-d, the Gateway API Inference Extension): per loaded model, labelled model_name as vLLM labels them.
Values are llamay's: sequences running and waiting on the model's scheduler, the share of its KV pages in use,
its page size and page count as vLLM's block_size and num_gpu_blocks, and prefix-cache queries and hits in
prompt tokens (server-wide: llamay counts them per server)."""
from __future__ import annotations


def render(registry, prompt_tokens: int, cached_tokens: int) -> list[str]:
    rows: dict[str, list[tuple[str, float]]] = {"num_requests_running": [], "num_requests_waiting": [],
                                                "kv_cache_usage_perc": [], "gpu_cache_usage_perc": [],
                                                "cache_config_info": []}
    for loaded in list(registry.loaded.values()):
        sched, view, name = loaded.scheduler, loaded.llm.kv_view(), _quote(loaded.info.name)
        used = (view.n_total - view.n_free) / view.n_total if view.n_total else 0.0
        label = f'model_name="{name}"'
        rows["num_requests_running"].append((label, sched.n_running))
        rows["num_requests_waiting"].append((label, sched.queue_depth))
        rows["kv_cache_usage_perc"].append((label, used))
        rows["gpu_cache_usage_perc"].append((label, used))  # the name before vLLM 0.10
        rows["cache_config_info"].append((f'{label},block_size="{view.page_size}",num_gpu_blocks="{view.n_total}",'
                                          'enable_prefix_caching="True",cache_dtype="auto"', 1))
    help_ = {"num_requests_running": "sequences running", "num_requests_waiting": "requests waiting",
             "kv_cache_usage_perc": "KV-cache usage (1 means 100 percent)", "gpu_cache_usage_perc": "KV-cache usage",
             "cache_config_info": "cache configuration (page size and pages in the labels)"}
    lines = []
    for metric, values in rows.items():
        lines += [f"# HELP vllm:{metric} {help_[metric]}", f"# TYPE vllm:{metric} gauge"]
        lines += [f"vllm:{metric}{{{label}}} {value}" for label, value in values]
    for metric, value, what in (("prefix_cache_queries_total", prompt_tokens, "prompt tokens looked up"),
                                ("prefix_cache_hits_total", cached_tokens, "of them, found in the prefix cache")):
        lines += [f"# HELP vllm:{metric} {what}", f"# TYPE vllm:{metric} counter", f"vllm:{metric} {value}"]
    return lines


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
