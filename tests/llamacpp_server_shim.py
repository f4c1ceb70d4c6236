"""Stands where llama.cpp's server test suite expects its llama-server binary: takes llama-server's command
line and runs `llamay serve` with it. The one translation is the model: the suite's presets name Hugging Face
repositories (not reachable here), so each is mapped to a local file of the same role (a chat model, an
embedding model); every other flag goes to `llamay serve` as given, so a flag llamay does not take fails the
start, as it would for a user. Test-only (tests/llamacpp_server_suite.py points the suite at it)."""
from __future__ import annotations

import os
import sys

# the suite's --hf-repo[/--hf-file] -> the role of the model it stands for
ROLES = {
    "ggml-org/test-model-stories260K": "chat",
    "ggml-org/test-model-stories260K-infill": "chat",
    "ggml-org/stories15M_MOE": "chat",
    "ggml-org/models/bert-bge-small/ggml-model-f16.gguf": "embed",
    "ggml-org/models/jina-reranker-v1-tiny-en/ggml-model-f16.gguf": "rerank",
    "ggml-org/tinygemma3-GGUF:Q8_0": "vision",
}
MODEL_FILES = {"chat": "LLAMAY_SUITE_CHAT_MODEL", "embed": "LLAMAY_SUITE_EMBED_MODEL"}  # role -> env var of its file


def translate(argv: list[str], env: dict) -> list[str]:
    """llama-server's argv -> `llamay serve`'s; ValueError for a model this machine has no stand-in for."""
    out, repo, file = [], None, None
    it = iter(argv)
    for a in it:
        if a in ("--hf-repo", "-hfr"):
            repo = next(it)
        elif a in ("--hf-file", "-hff"):
            file = next(it)
        elif a == "--offline":
            continue  # the models are local files already
        else:
            out.append(a)
    if repo is not None:
        key = f"{repo}/{file}" if file else repo
        role = ROLES.get(key)
        path = env.get(MODEL_FILES.get(role, ""), "")
        if not path:
            raise ValueError(f"no local stand-in for the suite's model {key} ({role or 'unknown role'})")
        out = ["-m", path, *out]
    return out


def main():
    try:
        args = translate(sys.argv[1:], dict(os.environ))
    except ValueError as e:
        print(f"llamacpp_server_shim: {e}", file=sys.stderr)
        sys.exit(2)
    os.execv(sys.executable, [sys.executable, "-m", "llamay.cli.main", "serve", *args])


if __name__ == "__main__":
    main()
