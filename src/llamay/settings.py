"""The one source of every default, by scope: loading a model, the scheduler, the server. CLI flags and
server options take their defaults, and the numbers in their help, from these fields; the engine and the
server read them too. Sampling's defaults are engine/sampling.py SamplingParams (llama.cpp's). A leaf
module: it imports nothing of llamay."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadSettings:
    """llamay.load and the -m/-t/-c/--kv/--kv-budget flags."""
    threads: int | None = None  # None: LLAMAY_THREADS, else the physical cores
    n_ctx: int = 4096  # tokens, capped at the model's training context
    kv: str = "f16"  # KV element types: kv/pool.py KV_TYPES
    kv_budget: int | None = None  # bytes of KV pages; None: pool_contexts full contexts
    pool_contexts: int = 4
    page_size: int = 32  # token slots per KV page
    # a hybrid model's recurrent state: slots for the contexts that hold computed tokens (each one fixed-size
    # state, allocated lazily), and bytes of state checkpoints kept for its prefix cache
    state_slots: int = 96
    state_checkpoints: int = 512 << 20
    max_checkpoints: int = 1024  # slots added for checkpoints at most (tiny states: not 512 MB of slots)
    # and checkpointed where each of the last few messages of a prompt starts (a chat template's turn marker),
    # so an edit of a recent message or a branch there resumes at that message, not a chunk before it
    turn_checkpoints: int = 3
    # but not a message starting fewer tokens than this after the checkpoint a generation's prompt resumes
    # from: a new turn then prefills in one pass, not two, and an edit there recomputes those tokens in its one
    turn_checkpoint_gap: int = 16
    # a dense model's logits at its prompts' ends (a prompt asked again, a regenerate, samples at once)
    prompt_logits: int = 64 << 20
    # matrices the kernel path has x16 tiles for are regrouped 16 rows at a time at load (a copy in memory,
    # built once; the same bits): decode then streams each matrix at the memory's speed
    repack: bool = True


@dataclass(frozen=True)
class CacheSettings:
    """The prefix cache's tiers below memory (engine/cache_tiers.py): --cache-dir, --cache-disk, --cache-redis."""
    disk: int = 2 << 30  # bytes of pages on disk per model for `serve` and `run` (LLAMAY_CACHE_DISK); 0: none
    api_disk: int = 0  # the same for llamay.load: the Python API writes nothing unless asked
    subdir: str = "kv"  # under $LLAMAY_HOME/cache, unless --cache-dir
    state_share: float = 0.25  # a hybrid model's state records may take this share of the disk budget more
    write_wait: float = 2.0  # seconds a queued write waits for the model to be idle before it goes on beside requests


@dataclass(frozen=True)
class SchedulerSettings:
    concurrency: int = 4  # sequences generated at once per model
    max_queue: int = 64  # requests waiting per model before 503
    batch: int = 512  # tokens per forward pass: bounds activation memory, never changes a result


@dataclass(frozen=True)
class SpecSettings:
    """Speculative decoding (engine/draft.py): llamay.load(spec=...) and a request's opt-out."""
    # draft.MODES: none | ngram (prompt lookup) | tree (the radix tree's other branches, else ngram) | draft
    mode: str = "tree"
    ngram_max: int = 3  # the longest suffix matched; shorter ones are tried down to 1
    # a decode step of 2, 4, 8, 16 tokens (drafts of 1, 3, 7, 15) relative to one of 1 token, as measured
    # inside generations of SmolLM2 on 2 cores (Gemma 3 270M: 1.21, 1.9, 2.2, 3.6); the longest draft: 15
    step_cost: tuple[float, ...] = (1.25, 1.8, 2.8, 4.8)
    draft_p_min: float = 0.75  # a draft model's draft stops at a token it gives less probability
    draft_cost: float | None = None  # a draft model's token relative to a target step; None: their sizes' ratio


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"  # loopback only
    port: int = 11435
    keep_alive: float = 300.0  # seconds a model stays loaded after its last request (Ollama's); < 0: forever
    max_contexts: int = 64  # named contexts (/v1/contexts) open at once, all models together
    context_ttl: float = 3600.0  # seconds an unused named context is kept; <= 0: forever
    reasoning_format: str = "auto"  # <think> split into reasoning by the chat template (chat/reasoning.py MODES)


@dataclass(frozen=True)
class KVEventSettings:
    """`serve --kv-events`: vLLM's KV-cache events over ZMQ (server/kv_events.py), for KV-aware gateways."""
    endpoint: str | None = None  # tcp://HOST:PORT (connects) or tcp://*:PORT (binds), as vLLM's; None: off
    topic: str = ""  # the first frame of every message (vLLM's default); {model} is the served model's name
    format: str = "array"  # events as positional arrays (vLLM up to 0.23) or "map" (tagged maps, later vLLM)
    queue: int = 100_000  # event records waiting for the publisher thread; past it they are dropped, counted
    hwm: int = 100_000  # the ZMQ PUB socket's high-water mark (messages queued for a slow subscriber)


@dataclass(frozen=True)
class RouteSettings:
    """`llamay route`: a front over several `llamay serve` processes."""
    host: str = "127.0.0.1"  # loopback only
    port: int = 11436  # beside serve's 11435
    prefix_chars: int = 128  # the routing key's text: about one KV page (32 tokens) of the prompt
    vnodes: int = 64  # points per backend on the hash ring: an even split, few keys moved when one leaves
    load_factor: float = 1.25  # a backend takes at most this times the mean in-flight load (bounded loads)
    health_interval: float = 2.0  # seconds between health checks of each backend
    health_timeout: float = 1.0  # seconds a health check may take before the backend counts as down
    connect_timeout: float = 2.0  # seconds to connect to a backend before failing over to the next
    max_body: int = 4 << 30  # bytes of a request body the front holds for failover (a large snapshot upload)


@dataclass(frozen=True)
class UpstreamSettings:
    """`serve --upstream`: models answered by an OpenAI-, Anthropic- or Ollama-compatible server."""
    api: str = "openai"  # the upstream's API when the flag names none
    timeout: float = 600.0  # seconds an upstream may stay silent (connecting, or between two bytes) before 504
    connect_timeout: float = 10.0  # seconds to connect (at most timeout)
    list_every: float = 60.0  # seconds between two readings of each upstream's model list
    max_tokens: int = 4096  # max_tokens sent to an Anthropic upstream (it requires one) when the request set none
    anthropic_version: str = "2023-06-01"  # the anthropic-version header sent to an Anthropic upstream


LOAD, SCHEDULER, SPEC, SERVER = LoadSettings(), SchedulerSettings(), SpecSettings(), ServerSettings()
CACHE, ROUTE, UPSTREAM = CacheSettings(), RouteSettings(), UpstreamSettings()
KV_EVENTS = KVEventSettings()


@dataclass(frozen=True)
class LoadOptions:
    """How one model loads: llamay.load's keyword arguments, the CLI's model flags (cli/common.load_options)
    and `serve`'s (server/models.Settings.load). Written once, here."""
    threads: int | None = LOAD.threads  # None: LLAMAY_THREADS, else the physical cores
    n_ctx: int | None = None  # None: LOAD.n_ctx; 0: the model's training context; at most that
    kv: str = LOAD.kv  # 'f16', 'f32', 'q8' (int8 keys and values), 'vq8' (int8 values)
    kv_budget: int | None = LOAD.kv_budget  # bytes of KV pages; None: LOAD.pool_contexts full contexts
    page_size: int = LOAD.page_size
    # (name, adapter GGUF, scale) of LoRA adapters applied unmerged to every request, in name order
    lora: tuple[tuple[str, str, float], ...] = ()
    # speculative decoding of a generation that does not choose: "tree", "ngram", "draft" or "none";
    # None: "draft" with a draft model, else SPEC.mode
    spec: str | None = None
    draft_model: str | None = None  # a GGUF file of the same vocabulary drafting for spec "draft"
    cache_disk: int = CACHE.api_disk  # bytes of the prefix cache's disk tier; 0: none (the CLI's default: CACHE.disk)
    cache_dir: str | None = None  # the disk tier's folder; None: $LLAMAY_HOME/cache/kv
    cache_redis: str | None = None  # redis://host:port/db of a Redis or Valkey shared tier; None: none
    repack: bool = LOAD.repack  # False: matmuls read the mapped file's rows as they are

    @classmethod
    def of(cls, base: LoadOptions | None = None, **overrides) -> LoadOptions:
        """base (default: the defaults) with fields replaced by name; TypeError for a name that is none."""
        names = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(overrides) - names)
        if bad:
            raise TypeError(f"unknown load option(s) {', '.join(bad)} (options: {', '.join(sorted(names))})")
        if "lora" in overrides:
            overrides["lora"] = tuple(tuple(a) for a in overrides["lora"] or ())
        return dataclasses.replace(base or cls(), **overrides)
