"""Embedding and rerank routes on a live server serving SmolLM2 (a decoder) and all-MiniLM-L6-v2 (an
encoder), through the official clients. Expected vectors and token counts are llama.cpp's
(shared/fixtures/llamacpp/minilm-l6-v2/embeddings.json)."""
import json
import threading

import httpx
import numpy as np
import ollama
import openai
import pytest
from conftest import LiveServer


pytestmark = pytest.mark.model
MINILM = "all-minilm-l6-v2-f16"
DECODER = "smollm2:135m"  # the default model's name (server.registry.DEFAULT_NAME)


@pytest.fixture(scope="module")
def reference(fixtures_dir):
    data = json.loads((fixtures_dir / "llamacpp" / "minilm-l6-v2" / "embeddings.json").read_text())
    return data["sentences"][:6]


@pytest.fixture(scope="module")
def server(smollm_path, fixtures_dir):
    srv = LiveServer(["-m", str(smollm_path), "-m", str(fixtures_dir / "models" / "all-minilm-l6-v2-f16.gguf"),
                      "--threads", "2", "-c", "1024", "--concurrency", "2"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_openai_sdk_base64_matches_llamacpp(oai, reference):
    res = oai.embeddings.create(model=MINILM, input=[s["text"] for s in reference])  # base64 by default
    assert [d.index for d in res.data] == list(range(len(reference)))
    for d, s in zip(res.data, reference):
        assert cosine(d.embedding, s["f16"]["l2"]) >= 0.9999
        assert np.linalg.norm(d.embedding) == pytest.approx(1.0, abs=1e-5)
    assert res.usage.prompt_tokens == sum(int(s["n_tokens"]) for s in reference)


def test_openai_token_ids_and_dimensions(oai, reference):
    s = reference[0]
    by_ids = oai.embeddings.create(model=MINILM, input=[s["token_ids"]], encoding_format="float")
    assert cosine(by_ids.data[0].embedding, s["f16"]["l2"]) >= 0.9999
    cut = oai.embeddings.create(model=MINILM, input=s["text"], dimensions=64)
    v = np.asarray(cut.data[0].embedding)
    ref = np.asarray(s["f16"]["l2"][:64])
    assert v.shape == (64,) and np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5) and cosine(v, ref) >= 0.9999
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        oai.embeddings.create(model=MINILM, input="x", dimensions=385)


def test_ollama_embed_and_legacy(server, reference):
    client = ollama.Client(host=server.url)
    res = client.embed(model=MINILM, input=[s["text"] for s in reference[:2]])
    assert len(res.embeddings) == 2 and res.model == MINILM
    assert cosine(res.embeddings[1], reference[1]["f16"]["l2"]) >= 0.9999
    assert res.prompt_eval_count == sum(int(s["n_tokens"]) for s in reference[:2]) and res.total_duration > 0
    raw = client.embeddings(model=MINILM, prompt=reference[0]["text"]).embedding
    ref_raw = np.asarray(reference[0]["f16"]["raw"])
    assert np.linalg.norm(raw) == pytest.approx(np.linalg.norm(ref_raw), rel=1e-3)  # not normalised
    assert cosine(raw, ref_raw) >= 0.9999


def test_truncate(server):
    long = "word " * 600  # > 512 tokens, minilm's context
    client = ollama.Client(host=server.url)
    with pytest.raises(ollama.ResponseError, match="exceeds the context length") as e:
        client.embed(model=MINILM, input=long, truncate=False)
    assert e.value.status_code == 400
    res = client.embed(model=MINILM, input=long)  # Ollama's default: cut at the context
    assert res.prompt_eval_count == 512 and len(res.embeddings[0]) == 384
    r = httpx.post(server.url + "/v1/embeddings", json={"model": MINILM, "input": long}, timeout=60)
    assert r.status_code == 400 and "512" in r.json()["error"]["message"]


def test_decoder_embeddings(oai, server):
    res = oai.embeddings.create(model=DECODER, input=["hello there", "a cat"],
                                encoding_format="float")
    vs = [np.asarray(d.embedding) for d in res.data]
    assert all(v.shape == (576,) and abs(np.linalg.norm(v) - 1) < 1e-5 for v in vs)
    assert cosine(vs[0], vs[1]) < 0.9999  # different inputs, different vectors
    server.check_pages()  # embedding left the KV state as it was


def test_embedding_while_generating(oai, server, reference):
    """A streamed chat on the decoder while both models embed: every request succeeds."""
    out, errors = {}, []

    def chat():
        try:
            stream = oai.chat.completions.create(model=DECODER, max_tokens=24, stream=True,
                                                 messages=[{"role": "user", "content": "Count to ten."}])
            out["chat"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    t = threading.Thread(target=chat)
    t.start()
    enc = oai.embeddings.create(model=MINILM, input=reference[2]["text"])
    dec = oai.embeddings.create(model=DECODER, input="hello")
    t.join(timeout=120)
    assert not errors and out.get("chat")
    assert cosine(enc.data[0].embedding, reference[2]["f16"]["l2"]) >= 0.9999 and len(dec.data[0].embedding) == 576


class FakeReranker:
    """Stands in for a rank-pooling model (no reranker weights here): score = shared words with the query."""
    pooling, n_embd, n_ctx = "rank", 4, 64

    def count_tokens(self, inputs):
        return [len(x.split()) + 2 for x in inputs]

    def rank(self, query, documents):
        q = set(query.split())
        return [float(len(q & set(d.split()))) for d in documents]


def test_rerank_routes(server):
    server.registry.pinned["fake-reranker"] = server.registry.pinned[MINILM]
    from llamay.server.embed_models import Embedders
    embedders = getattr(server.app.state, "embedders", None) or Embedders(server.registry.settings)
    server.app.state.embedders = embedders
    embedders.models["fake-reranker"] = FakeReranker()
    body = {"model": "fake-reranker", "query": "red fox", "documents": ["blue sky", "red fox runs", "red car"],
            "top_n": 2, "return_documents": True}
    for path in ("/v1/rerank", "/rerank", "/reranking"):
        r = httpx.post(server.url + path, json=body, timeout=30).json()
        assert [x["index"] for x in r["results"]] == [1, 2]
        assert r["results"][0]["document"] == {"text": "red fox runs"}
        assert r["usage"]["prompt_tokens"] == 3 * 4 + 4 + 5 + 4
    r = httpx.post(server.url + "/v1/rerank", json={**body, "model": MINILM}, timeout=30)
    assert r.status_code == 400 and "rank" in r.json()["error"]["message"]


def test_errors_in_api_shape(server):
    r = httpx.post(server.url + "/v1/embeddings", json={"model": "nope", "input": "x"}, timeout=30)
    assert r.status_code == 404 and "nope" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/api/embed", json={"model": MINILM, "input": 5}, timeout=30)
    assert r.status_code == 400 and r.json() == {"error": "invalid input type"}
    r = httpx.post(server.url + "/v1/embeddings", json={"model": MINILM, "input": [[999999]]}, timeout=30)
    assert r.status_code == 400 and "vocabulary" in r.json()["error"]["message"]


def _cli(command, argv: list[str]):
    import argparse
    p = argparse.ArgumentParser()
    command.add_parser(p)
    return command.run(p.parse_args(argv))


def test_cli_embed_json(fixtures_dir, reference, capsys):
    from llamay.cli.embed import EMBED
    path = str(fixtures_dir / "models" / "all-minilm-l6-v2-f16.gguf")
    assert _cli(EMBED, ["-m", path, "-t", "2", reference[0]["text"], reference[1]["text"]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == path and len(out["embeddings"]) == 2
    assert all(cosine(v, s["f16"]["l2"]) >= 0.9999 for v, s in zip(out["embeddings"], reference))


def test_cli_rerank(fixtures_dir):
    from llamay.cli.common import CLIError
    from llamay.cli.embed import RERANK, rank_table
    with pytest.raises(CLIError, match="not a reranker"):
        _cli(RERANK, ["-m", str(fixtures_dir / "models" / "all-minilm-l6-v2-f16.gguf"), "-q", "q", "a", "b"])
    rows = rank_table(["low", "high", "mid"], [0.1, 2.5, 1.0]).splitlines()
    assert rows[0].split() == ["RANK", "SCORE", "INDEX", "DOCUMENT"]
    assert [r.split()[2] for r in rows[1:]] == ["1", "2", "0"] and rows[1].split()[1] == "2.5000"


def test_keep_alive_zero_unloads_encoder(server):
    client = ollama.Client(host=server.url)
    client.embed(model=MINILM, input="loaded")
    assert MINILM in server.app.state.embedders.models
    assert len(client.embed(model=MINILM, input="then gone", keep_alive=0).embeddings) == 1
    assert MINILM not in server.app.state.embedders.models
