"""Embedding / rerank converters (server/protocol/embeddings.py): dict fixtures, no server, no model.

Response shapes are checked by the official SDKs: the openai client (which asks for base64 by default and
decodes it itself) and the ollama client, both talking to the converters through an httpx MockTransport."""
import json

import httpx
import numpy as np
import ollama
import openai
import pytest
from openai.types import CreateEmbeddingResponse

from llamay.server.protocol import embeddings as conv
from llamay.server.protocol.base import ProtocolError

RNG = np.random.default_rng(7)


def vectors(n: int, dim: int = 12, unit: bool = True) -> list[np.ndarray]:
    out = RNG.standard_normal((n, dim)).astype(np.float32)
    if unit:
        out /= np.linalg.norm(out, axis=1, keepdims=True)
    return list(out)


def openai_server(made: dict):
    """A MockTransport serving /embeddings with the converters; made['vectors'] records what was sent."""
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        made["request"] = body
        try:
            req = conv.parse_openai(body)
            vs = conv.shape_vectors(vectors(len(req.inputs)), req, 12)
        except ProtocolError as e:
            return httpx.Response(e.status, json={"error": {"message": e.message, "type": "invalid_request_error",
                                                            "param": e.param, "code": None}})
        made["vectors"] = vs
        return httpx.Response(200, json=conv.openai_body(req, req.model, vs, 5 * len(vs)))
    return openai.OpenAI(base_url="http://test/v1", api_key="x",
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)))


# ------------------------------------------------------------------------------------------------ OpenAI

@pytest.mark.parametrize("raw, expect, single", [
    ("hello", ["hello"], True),
    (["a", "b"], ["a", "b"], False),
    ([1, 2, 3], [[1, 2, 3]], True),
    ([[1, 2], [3]], [[1, 2], [3]], False),
    (["a", [4, 5]], ["a", [4, 5]], False),
])
def test_openai_inputs(raw, expect, single):
    req = conv.parse_openai({"model": "m", "input": raw})
    assert req.inputs == expect and req.single is single
    assert req.encoding_format == "float" and req.normalize and req.dimensions is None


def test_empty_strings_are_inputs():
    """llama-server embeds an empty text (routes_embed refuses it where the model adds no special tokens)."""
    assert conv.parse_openai({"model": "m", "input": ""}).inputs == [""]
    assert conv.parse_openai({"model": "m", "input": ["a", ""]}).inputs == ["a", ""]


@pytest.mark.parametrize("body, param", [
    ({"model": ["m"], "input": "x"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [[]]}, "input"),
    ({"model": "m", "input": [1.5]}, "input"),
    ({"model": "m", "input": [True]}, "input"),
    ({"model": "m", "input": {"a": 1}}, "input"),
    ({"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
    ({"model": "m", "input": "x", "dimensions": "4"}, "dimensions"),
])
def test_openai_bad_requests(body, param):
    with pytest.raises(ProtocolError) as e:
        conv.parse_openai(body)
    assert e.value.status == 400 and e.value.param == param and param in e.value.message


def test_sdk_default_base64_roundtrip():
    """The SDK asks for base64 unless told otherwise and decodes little-endian float32 itself."""
    made = {}
    res = openai_server(made).embeddings.create(model="m", input=["one", "two", "three"])
    assert made["request"]["encoding_format"] == "base64"
    assert [d.index for d in res.data] == [0, 1, 2]
    for d, v in zip(res.data, made["vectors"]):
        assert d.embedding == pytest.approx(v.tolist(), abs=0)  # float32 exactly
    assert res.usage.prompt_tokens == res.usage.total_tokens == 15


def test_sdk_float_and_token_ids():
    made = {}
    res = openai_server(made).embeddings.create(model="m", input=[[1, 2], [3]], encoding_format="float")
    assert made["request"]["input"] == [[1, 2], [3]]
    assert len(res.data) == 2 and len(res.data[1].embedding) == 12


def test_sdk_dimensions_renormalised():
    made = {}
    res = openai_server(made).embeddings.create(model="m", input="x", dimensions=5)
    v = np.array(res.data[0].embedding)
    assert v.shape == (5,) and np.linalg.norm(v) == pytest.approx(1.0, abs=1e-6)


def test_sdk_dimensions_too_large_is_400():
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        openai_server({}).embeddings.create(model="m", input="x", dimensions=13)


def test_base64_is_little_endian_float32():
    v = np.array([1.0, -2.5, 3.25], np.float32)
    raw = __import__("base64").b64decode(conv.encode_base64(v))
    assert np.frombuffer(raw, "<f4").tolist() == [1.0, -2.5, 3.25]
    body = conv.openai_body(conv.parse_openai({"model": "m", "input": "x"}), "m", [v], 3)
    CreateEmbeddingResponse.model_validate(body)  # the float form is the SDK's own model as is


def test_dimensions_keeps_prefix_direction():
    v = vectors(1)[0]
    req = conv.parse_openai({"model": "m", "input": "x", "dimensions": 4})
    out = conv.shape_vectors([v], req, 12)[0]
    assert np.allclose(out, v[:4] / np.linalg.norm(v[:4]), atol=1e-7)


# ------------------------------------------------------------------------------------------------ Ollama

def ollama_client(made: dict):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        try:
            if request.url.path == "/api/embed":
                req = conv.parse_ollama_embed(body)
                vs = conv.shape_vectors(vectors(len(req.inputs)), req, 12)
                made["vectors"] = vs
                return httpx.Response(200, json=conv.ollama_embed_body(req.model, vs, 7, 1000, 10))
            req = conv.parse_ollama_embeddings(body)
            vs = vectors(len(req.inputs), unit=False) * 3
            made["vectors"] = vs
            return httpx.Response(200, json=conv.ollama_embeddings_body(vs))
        except ProtocolError as e:
            return httpx.Response(e.status, json={"error": e.message})
    return ollama.Client(host="http://test", transport=httpx.MockTransport(handler))


def test_ollama_embed_client():
    made = {}
    res = ollama_client(made).embed(model="all-minilm", input=["a", "b"])
    assert len(res.embeddings) == 2 and res.model == "all-minilm"
    assert res.prompt_eval_count == 7 and res.total_duration == 1000 and res.load_duration == 10
    assert np.allclose(res.embeddings[1], made["vectors"][1], atol=0)


def test_ollama_embed_dimensions():
    res = ollama_client({}).embed(model="m", input="a", dimensions=3)
    assert len(res.embeddings[0]) == 3 and np.linalg.norm(res.embeddings[0]) == pytest.approx(1, abs=1e-6)
    with pytest.raises(ollama.ResponseError, match="dimensions"):
        ollama_client({}).embed(model="m", input="a", dimensions=99)


def test_ollama_legacy_embeddings_raw():
    made = {}
    res = ollama_client(made).embeddings(model="m", prompt="hello")
    assert np.allclose(res.embedding, made["vectors"][0], atol=0)
    assert conv.parse_ollama_embeddings({"model": "m", "prompt": "x"}).normalize is False
    assert conv.ollama_embeddings_body([]) == {"embedding": []}


@pytest.mark.parametrize("body, inputs, truncate", [
    ({"model": "m", "input": "x"}, ["x"], True),
    ({"model": "m", "input": ["x", "y"], "truncate": False}, ["x", "y"], False),
    ({"model": "m", "input": []}, [], True),
    ({"model": "m", "input": ""}, [], True),
    ({"model": "m"}, [], True),
])
def test_ollama_embed_parse(body, inputs, truncate):
    req = conv.parse_ollama_embed({**body, "keep_alive": "5m"})
    assert req.inputs == inputs and req.truncate is truncate and req.keep_alive == 300.0


@pytest.mark.parametrize("body, param", [
    ({"model": 3, "input": "x"}, "model"),
    ({"model": "m", "input": 3}, "input"),
    ({"model": "m", "input": [1, 2]}, "input"),
    ({"model": "m", "input": "x", "truncate": "no"}, "truncate"),
    ({"model": "m", "input": "x", "keep_alive": [1]}, "keep_alive"),
    ({"model": "m", "input": "x", "options": 3}, "options"),
])
def test_ollama_embed_errors(body, param):
    with pytest.raises(ProtocolError) as e:
        conv.parse_ollama_embed(body)
    assert e.value.status == 400 and e.value.param == param


def test_ollama_rejects_nan():
    with pytest.raises(ProtocolError) as e:
        conv.ollama_embed_body("m", [np.array([np.nan, 1.0], np.float32)], 1, 1, 0)
    assert e.value.status == 500


# ------------------------------------------------------------------------------------------------ rerank

def test_rerank_sorted_and_top_n():
    req = conv.parse_rerank({"query": "q", "documents": ["a", "b", "c", "d"], "top_n": 2, "return_documents": True})
    body = conv.rerank_body(req, "rr", [0.5, 3.0, -1.0, 2.0], 20)
    assert [r["index"] for r in body["results"]] == [1, 3]
    assert [r["relevance_score"] for r in body["results"]] == [3.0, 2.0]
    assert body["results"][0]["document"] == {"text": "b"}
    assert body["usage"] == {"prompt_tokens": 20, "total_tokens": 20} and body["object"] == "list"


def test_rerank_default_all_and_tei():
    req = conv.parse_rerank({"query": "q", "documents": ["a", "b"]})
    assert req.top_n == 2 and req.model is None
    body = conv.rerank_body(req, "rr", [1.0, 2.0], 4)
    assert [r["index"] for r in body["results"]] == [1, 0] and "document" not in body["results"][0]
    tei = conv.parse_rerank({"query": "q", "texts": ["a", "b"], "return_text": True})
    assert conv.rerank_body(tei, "rr", [1.0, 2.0], 4) == [{"index": 1, "score": 2.0, "text": "b"},
                                                         {"index": 0, "score": 1.0, "text": "a"}]


@pytest.mark.parametrize("body, param", [
    ({"documents": ["a"]}, "query"),
    ({"query": 3, "documents": ["a"]}, "query"),
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q"}, "documents"),
    ({"query": "q", "documents": ["a", 2]}, "documents"),
    ({"query": "q", "documents": ["a"], "top_n": -1}, "top_n"),
])
def test_rerank_errors(body, param):
    with pytest.raises(ProtocolError) as e:
        conv.parse_rerank(body)
    assert e.value.status == 400 and e.value.param == param
