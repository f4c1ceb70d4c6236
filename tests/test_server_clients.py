"""The official openai, anthropic and ollama Python clients against `llamay serve` on 127.0.0.1 (the
default model): each client works by changing its base URL only, streams accumulate to what the whole
answer says, and a repeated prompt is reported as a prefix-cache hit in each API's own field."""
import anthropic
import ollama
import openai
import pytest

import llamay

pytestmark = pytest.mark.model

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0}  # anthropic 2.x has no temperature argument; the API still takes the field


@pytest.fixture(scope="module")
def oai(live_server):
    return openai.OpenAI(base_url=live_server.url + "/v1", api_key="sk-no-key-required", max_retries=0)


@pytest.fixture(scope="module")
def claude(live_server):
    return anthropic.Anthropic(base_url=live_server.url, api_key="any", max_retries=0)


@pytest.fixture(scope="module")
def olla(live_server):
    return ollama.Client(host=live_server.url)


@pytest.fixture(scope="module")
def model_name(oai):
    return oai.models.list().data[0].id


@pytest.fixture(scope="module")
def engine_answer(smollm_path):
    """What the engine itself answers, greedy (the server must say the same through every API)."""
    from llamay.chat import prompt_ids, template_for
    llm = llamay.load(smollm_path, threads=2)
    ids = prompt_ids(template_for(llm.metadata, llm.tokenizer), llm.tokenizer, QUESTION)
    return "".join(llm.generate(ids, max_tokens=24, temperature=0))


def test_openai_chat_whole_and_streamed_agree_with_the_engine(oai, model_name, engine_answer):
    whole = oai.chat.completions.create(model=model_name, messages=QUESTION, max_tokens=24, temperature=0)
    assert whole.choices[0].message.content == engine_answer
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0
    chunks = list(oai.chat.completions.create(model=model_name, messages=QUESTION, max_tokens=24, temperature=0,
                                              stream=True, stream_options={"include_usage": True}))
    assert [c.choices[0].delta.role for c in chunks[:2]] == ["assistant", None]  # the role comes once
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == engine_answer
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    again = oai.chat.completions.create(model=model_name, messages=QUESTION, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens  # nothing computed


def test_openai_choices_logprobs_stop_and_completions(oai, model_name, engine_answer):
    out = oai.chat.completions.create(model=model_name, messages=QUESTION, max_tokens=6, n=2, seed=3,
                                      temperature=1.0, logprobs=True, top_logprobs=3)
    assert [c.index for c in out.choices] == [0, 1]
    for choice in out.choices:
        entries = choice.logprobs.content
        assert entries and all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in entries)
        assert "".join(e.token for e in entries).startswith(choice.message.content[:3])
    stop = engine_answer[6:10]
    stopped = oai.chat.completions.create(model=model_name, messages=QUESTION, max_tokens=24, temperature=0,
                                          stop=[stop])
    assert stopped.choices[0].message.content == engine_answer[:engine_answer.find(stop)]
    assert stopped.choices[0].finish_reason == "stop"
    done = oai.completions.create(model=model_name, prompt="The capital of France is", max_tokens=5, temperature=0)
    assert done.choices[0].text and done.choices[0].finish_reason == "length"
    assert done.usage.completion_tokens == 5


def test_openai_responses_and_models(oai, model_name):
    resp = oai.responses.create(model=model_name, input="Say hello.", max_output_tokens=8, temperature=0)
    assert resp.output_text
    if resp.usage.output_tokens == 8:  # stopped by the limit
        assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    else:
        assert resp.status == "completed"
    streamed = ""
    with oai.responses.stream(model=model_name, input="Say hello.", max_output_tokens=8, temperature=0) as s:
        for ev in s:
            if ev.type == "response.output_text.delta":
                streamed += ev.delta
    assert ev.type == f"response.{resp.status}"  # the last event (the SDK's final response needs 'completed')
    assert streamed == resp.output_text
    assert oai.models.retrieve(model_name).id == model_name


def test_openai_errors_are_typed(oai, model_name):
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="no-such-model", messages=QUESTION)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "hi " * 3000}])
    assert e.value.code == "context_length_exceeded"


def test_anthropic_messages_whole_streamed_and_counted(claude, model_name, engine_answer):
    whole = claude.messages.create(model=model_name, max_tokens=24, messages=QUESTION, extra_body=GREEDY)
    assert whole.content[0].text == engine_answer
    with claude.messages.stream(model=model_name, max_tokens=24, messages=QUESTION, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == engine_answer == final.content[0].text
    assert final.usage.cache_read_input_tokens > 0  # the same prompt again
    assert final.usage.output_tokens == whole.usage.output_tokens
    counted = claude.messages.count_tokens(model=model_name, messages=QUESTION)
    assert counted.input_tokens == whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    stop = engine_answer[6:10]
    stopped = claude.messages.create(model=model_name, max_tokens=24, messages=QUESTION, extra_body=GREEDY,
                                     stop_sequences=[stop])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    assert stopped.content[0].text == engine_answer[:engine_answer.find(stop)]
    system = claude.messages.create(model=model_name, max_tokens=4, system="You answer in French.",
                                    messages=QUESTION, extra_body=GREEDY)
    assert system.usage.input_tokens + system.usage.cache_read_input_tokens != counted.input_tokens


def test_anthropic_stream_usage_agrees_from_its_start(claude, model_name):
    """message_start carries the usage the stream ends with (uncached input_tokens, cached part as
    cache_read_input_tokens), as the API sends it; the whole response says the same."""
    ask = {"model": model_name, "max_tokens": 4, "extra_body": GREEDY,
           "messages": [{"role": "user", "content": "Name three colours of the rainbow."}]}
    first = claude.messages.create(**ask)
    with claude.messages.stream(**ask) as stream:
        start = next(ev for ev in stream if ev.type == "message_start").message.usage
        final = stream.get_final_message().usage
    assert final.cache_read_input_tokens > 0  # the same prompt again
    assert (start.input_tokens, start.cache_read_input_tokens) == (final.input_tokens, final.cache_read_input_tokens)
    again = claude.messages.create(**ask).usage
    assert (again.input_tokens, again.cache_read_input_tokens) == (final.input_tokens, final.cache_read_input_tokens)
    assert first.usage.input_tokens + first.usage.cache_read_input_tokens == final.input_tokens + \
        final.cache_read_input_tokens


def test_anthropic_errors_are_typed(claude):
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="no-such-model", max_tokens=4, messages=QUESTION)


def test_ollama_chat_generate_and_listing(olla, model_name, engine_answer):
    whole = olla.chat(model=model_name, messages=QUESTION, options={"temperature": 0, "num_predict": 24}, stream=False)
    assert whole.message.content == engine_answer
    assert whole.done and whole.eval_count > 0 and whole.total_duration > 0
    pieces = list(olla.chat(model=model_name, messages=QUESTION, options={"temperature": 0, "num_predict": 24},
                            stream=True))
    assert "".join(p.message.content for p in pieces) == engine_answer
    # the whole prompt cached with the logits at its end: nothing evaluated (0, omitted as Go's omitempty does)
    assert pieces[-1].done and pieces[-1].prompt_eval_count is None
    gen = olla.generate(model=model_name, prompt="Why is the sky blue?", options={"temperature": 0, "num_predict": 8})
    assert gen.response and gen.done_reason == "length" and gen.context
    names = [m.model for m in olla.list().models]
    assert model_name in names
    shown = olla.show(model_name)
    assert shown.details.format == "gguf" and shown.modelinfo["general.architecture"] == "llama"
    assert model_name in [m.model for m in olla.ps().models]


def test_ollama_errors(olla):
    with pytest.raises(ollama.ResponseError) as e:
        olla.chat(model="no-such-model", messages=QUESTION, stream=False)
    assert e.value.status_code == 404
