"""Structured output on every API of `llamay serve`, sampled at temperature 1.0 from the default model: what
comes back validates against the schema (checked with jsonschema), GBNF output is in the grammar's
language, and a schema the compiler refuses is a 400, never silently ignored."""
import json

import anthropic
import httpx
import jsonschema
import openai
import pytest

pytestmark = pytest.mark.model

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "pet": {"enum": ["cat", "dog", "none"]}},
          "required": ["name", "age", "pet"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(scope="module")
def oai(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def test_openai_json_schema_and_json_object(oai, model):
    out = oai.chat.completions.create(
        model=model, messages=ASK, temperature=1.0, seed=1, max_tokens=120, n=2,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    for choice in out.choices:
        jsonschema.validate(json.loads(choice.message.content), PERSON)
        assert choice.finish_reason == "stop"  # the grammar ended it, complete
    finished = 0
    for seed in range(3, 6):  # any JSON object: free-form strings may run to max_tokens (then it is a prefix)
        obj = oai.chat.completions.create(model=model, messages=ASK, temperature=1.0, seed=seed, max_tokens=60,
                                          response_format={"type": "json_object"})
        choice = obj.choices[0]
        assert choice.message.content.startswith("{")
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
            finished += 1
    assert finished


def test_ollama_format_schema_and_json(url, model):
    r = httpx.post(url + "/api/chat", timeout=120, json={
        "model": model, "messages": ASK, "format": PERSON, "stream": False,
        "options": {"temperature": 1.0, "seed": 1, "num_predict": 120}}).json()
    jsonschema.validate(json.loads(r["message"]["content"]), PERSON)
    r = httpx.post(url + "/api/generate", timeout=120, json={
        "model": model, "prompt": "A JSON object with a key 'ok':", "format": "json", "stream": False,
        "options": {"temperature": 1.0, "seed": 3, "num_predict": 60}}).json()
    assert r["response"].startswith("{")
    if r["done_reason"] == "stop":
        assert isinstance(json.loads(r["response"]), dict)


def test_anthropic_output_format(url, model):
    claude = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
    msg = claude.messages.create(model=model, max_tokens=120, messages=ASK, extra_body={
        "temperature": 1.0, "output_config": {"format": {"type": "json_schema", "schema": PERSON}}})
    jsonschema.validate(json.loads(msg.content[0].text), PERSON)


def test_gbnf_grammar_field(url, model):
    for seed in range(3):
        r = httpx.post(url + "/v1/completions", timeout=60, json={
            "model": model, "prompt": "Is the sky green?", "max_tokens": 8, "temperature": 1.0, "seed": seed,
            "grammar": 'root ::= " " ("yes" | "no")'}).json()
        assert r["choices"][0]["text"] in (" yes", " no")


def test_a_schema_the_compiler_refuses_is_a_400(oai, model):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model, messages=ASK, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
                "a": {"type": "string", "format": "no-such-format"}}}}})
    assert "schema" in str(e.value)


def test_context_generation_cut_off_keeps_its_grammar_across_requests_and_snapshots(url, model):
    """A named context's constrained generation stopped by max_tokens: the next request continues under the
    same grammar, and the context's snapshot carries it (a restored copy continues identically)."""
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    with httpx.Client(base_url=url, timeout=120) as http:
        made = [http.post("/v1/contexts", json={"model": model, "messages": ASK}).json()["id"]]
        try:
            head = http.post(f"/v1/contexts/{made[0]}/generate",
                             json={"response_format": fmt, "max_tokens": 6, "temperature": 0}).json()["choices"][0]
            assert head["finish_reason"] == "length"
            snapshot = http.get(f"/v1/contexts/{made[0]}/snapshot").content
            rest = http.post(f"/v1/contexts/{made[0]}/generate",
                             json={"max_tokens": 200, "temperature": 0}).json()["choices"][0]
            assert rest["finish_reason"] == "stop"
            jsonschema.validate(json.loads(head["text"] + rest["text"]), PERSON)
            made.append(http.post("/v1/contexts", params={"model": model}, content=snapshot,
                                  headers={"content-type": "application/octet-stream"}).json()["id"])
            again = http.post(f"/v1/contexts/{made[1]}/generate",
                              json={"max_tokens": 200, "temperature": 0}).json()["choices"][0]
            assert again["text"] == rest["text"]
        finally:
            for cid in made:
                http.delete(f"/v1/contexts/{cid}")
