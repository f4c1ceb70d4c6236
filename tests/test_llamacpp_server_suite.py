"""A fast part of llama.cpp's own server tests, run against `llamay serve` (tests/llamacpp_server_suite.py):
every test of these files that is not listed as expecting the suite's own model, kept different on purpose
or open passes; and every listed one names tests of the suite. scripts/llamacpp_server_suite.py runs all of it."""
from __future__ import annotations

import pytest
from conftest import CACHE

import llamacpp_server_suite as suite
from llamacpp_server_shim import translate

# files of a few seconds per test: the route gates, /props, /models, the metrics, ignore_eos's logit_bias
FAST = ("basic", "metrics", "ignore_eos")


def test_shim_maps_the_suite_models_and_passes_every_other_flag():
    env = {"LLAMAY_SUITE_CHAT_MODEL": "/m/chat.gguf", "LLAMAY_SUITE_EMBED_MODEL": "/m/embed.gguf"}
    assert translate(["--offline", "--hf-repo", "ggml-org/test-model-stories260K", "--no-slots", "-c", "8"], env) \
        == ["-m", "/m/chat.gguf", "--no-slots", "-c", "8"]
    assert translate(["--hf-repo", "ggml-org/models", "--hf-file", "bert-bge-small/ggml-model-f16.gguf"], env) \
        == ["-m", "/m/embed.gguf"]
    with pytest.raises(ValueError, match="jina-reranker"):  # no local reranker: the start fails, said why
        translate(["--hf-repo", "ggml-org/models", "--hf-file", "jina-reranker-v1-tiny-en/ggml-model-f16.gguf"], env)


def test_listed_tests_exist():
    unit = suite.suite_dir(CACHE) / "unit"
    sources = {f.stem.removeprefix("test_"): f.read_text() for f in unit.glob("test_*.py")}
    for table in (suite.EXCLUDED, suite.KEPT, suite.OPEN):
        for prefix in table:
            path, _, name = prefix.partition("::")
            file = path.removeprefix("unit/test_").removesuffix(".py")
            assert file in suite.FILES, prefix
            assert f"def {name.split('[')[0].removesuffix('$')}" in sources[file], f"{prefix}: no such test in the suite"


@pytest.mark.parametrize("file", FAST)
def test_suite_file_holds_its_classification(file):
    outcomes = suite.run(CACHE, file, timeout=600)
    assert outcomes, f"no test of unit/test_{file}.py ran"
    kinds = suite.classify(outcomes)
    assert not kinds["fail"], f"tests classified as passing fail: {kinds['fail']}"
    assert kinds["pass"], f"nothing of unit/test_{file}.py passed"
