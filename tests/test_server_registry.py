"""Several models on one address: each answers by its name, loads on first use and unloads after its
keep_alive (not while it holds named contexts)."""
import time

import httpx
import pytest

from conftest import LiveServer




@pytest.fixture(scope="module")
def two_models(smollm_path, gemma_path):
    server = LiveServer(["-m", str(smollm_path), "-m", str(gemma_path), "--threads", "2", "-c", "512"])
    yield server
    server.stop()


def _names(url: str) -> list[str]:
    return [m["model"] for m in httpx.get(url + "/api/ps").json()["models"]]


@pytest.mark.model
def test_models_load_on_first_use_and_unload_after_keep_alive(two_models):
    url = two_models.url
    listed = [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]]
    assert listed == ["smollm2:135m", "gemma-3-270m-q4_k_m"]
    assert _names(url) == []  # nothing loaded before a request
    r = httpx.post(url + "/api/generate", json={"model": "gemma-3-270m-q4_k_m", "prompt": "The sky is",
                                                "raw": True, "stream": False, "options": {"num_predict": 3},
                                                "keep_alive": "1s"}, timeout=120)
    assert r.status_code == 200 and r.json()["done"] and r.json()["load_duration"] > 0
    assert _names(url) == ["gemma-3-270m-q4_k_m"]
    r = httpx.post(url + "/v1/completions", json={"model": "smollm2:135m", "prompt": "Hi", "max_tokens": 2},
                   timeout=120)
    assert r.status_code == 200
    assert sorted(_names(url)) == ["gemma-3-270m-q4_k_m", "smollm2:135m"]
    time.sleep(1.1)
    two_models.registry.reap()  # (the server's own reaper may have been first)
    assert _names(url) == ["smollm2:135m"]  # smollm2 keeps the default 300 s


@pytest.mark.model
def test_a_model_holding_contexts_stays_loaded(two_models):
    url = two_models.url
    r = httpx.post(url + "/v1/contexts", json={"model": "gemma-3-270m-q4_k_m", "prompt": "Once upon a time"},
                   timeout=120)
    assert r.status_code == 201
    later = time.time() + 10_000
    two_models.registry.reap(now=later)
    assert "gemma-3-270m-q4_k_m" in _names(url)
    assert httpx.delete(f"{url}/v1/contexts/{r.json()['id']}").status_code == 200
    two_models.registry.reap(now=later)
    assert "gemma-3-270m-q4_k_m" not in _names(url)


def test_the_fallback_file_is_served_only_when_nothing_else_is(tmp_path):
    from llamay.server.registry import DEFAULT_NAME, Registry, Settings
    fallback, pinned = tmp_path / "default.gguf", tmp_path / "mine.gguf"
    assert Registry([], Settings(), fallback=str(fallback)).paths == {DEFAULT_NAME: str(fallback)}
    assert Registry([str(pinned)], Settings(), use_store=False, fallback=str(fallback)).paths == {"mine": str(pinned)}
