"""One LoadOptions from every entry: llamay.load's keywords, the CLI's flags and `serve`'s settings."""
import pytest

import llamay
from llamay.cli.common import load_options
from llamay.cli.main import build_parser
from llamay.cli.serve import build_app
from llamay.settings import CACHE, LoadOptions


def test_fields_replaced_by_name_and_an_unknown_one_refused():
    base = LoadOptions(n_ctx=512, kv="q8")
    got = LoadOptions.of(base, threads=3, lora=[["a", "a.gguf", 0.5]])
    assert got == LoadOptions(threads=3, n_ctx=512, kv="q8", lora=(("a", "a.gguf", 0.5),))
    assert LoadOptions.of(lora=None).lora == ()
    with pytest.raises(TypeError, match="unknown load option.*n_gpu_layers"):
        LoadOptions.of(n_gpu_layers=99)


def test_run_flags_become_the_options(tmp_path):
    args = build_parser().parse_args(["run", "-t", "2", "-c", "1024", "--kv", "vq8", "--kv-budget", "64M",
                                      "--spec", "ngram", "--cache-disk", "0", "-p", "x"])
    assert load_options(args) == LoadOptions(threads=2, n_ctx=1024, kv="vq8", kv_budget=64 << 20, spec="ngram",
                                             cache_disk=0)


def test_the_cli_default_disk_tier_differs_from_the_api_one(monkeypatch):
    monkeypatch.delenv("LLAMAY_CACHE_DISK", raising=False)
    args = build_parser().parse_args(["run", "-p", "x"])
    assert load_options(args).cache_disk == CACHE.disk and LoadOptions().cache_disk == CACHE.api_disk == 0


def test_serve_settings_carry_the_same_options(smollm_path):
    args = build_parser().parse_args(["serve", "-m", str(smollm_path), "-t", "1", "-c", "256", "--cache-disk", "0"])
    settings = build_app(args).state.registry.settings
    assert settings.load == LoadOptions(threads=1, n_ctx=256, cache_disk=0)


def test_load_takes_options_and_keywords(smollm_path):
    llm = llamay.load(smollm_path, LoadOptions(threads=1, n_ctx=64), n_ctx=128)
    assert llm.options == LoadOptions(threads=1, n_ctx=128) and llm.n_ctx == 128
