"""The harmony output format (toolcall/harmony.py): channels split into reasoning and content, calls to
functions.* read, whatever the pieces' boundaries."""
import json

import pytest

from llamay.toolcall.harmony import HarmonyReader, is_harmony

REASON = "<|channel|>analysis<|message|>User asks weather. Use tool.<|end|>"
CALL_AFTER = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
CALL_BEFORE = "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
ARGS = '{"city": "Paris"}'


def read(text: str, piece: int):
    r, content, reasoning, calls = HarmonyReader(), "", "", []
    for i in range(0, len(text), piece):
        c, t, k = r.feed(text[i:i + piece])
        content, reasoning, calls = content + c, reasoning + t, calls + k
    c, t, k = r.flush()
    return content + c, reasoning + t, calls + k


@pytest.mark.parametrize("piece", [1, 3, 7, 1000])
def test_analysis_then_final(piece):
    text = REASON + "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris."
    content, reasoning, calls = read(text, piece)
    assert (content, reasoning, calls) == ("It is sunny in Paris.", "User asks weather. Use tool.", [])


@pytest.mark.parametrize("header", [CALL_AFTER, CALL_BEFORE])
@pytest.mark.parametrize("piece", [1, 5, 1000])
def test_a_call_in_either_header_form(header, piece):
    content, reasoning, calls = read(REASON + header + ARGS, piece)  # <|call|> is the stop token: not in text
    assert content == "" and reasoning == "User asks weather. Use tool."
    assert [(c.index, c.name, json.loads(c.arguments)) for c in calls] == [(0, "get_weather", {"city": "Paris"})]
    assert calls[0].id.startswith("call_") and len(calls[0].id) == 29


def test_two_calls_and_a_preamble():
    text = ("<|channel|>commentary<|message|>Checking both.<|end|>" + CALL_AFTER + ARGS + "<|call|>"
            + CALL_AFTER + '{"city": "Rome"}<|call|>')
    content, reasoning, calls = read(text, 2)
    assert content == "Checking both." and reasoning == ""
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Paris", "Rome"] and [c.index for c in calls] == [0, 1]


def test_text_without_any_header_is_content():
    assert read("plain words", 3) == ("plain words", "", [])


def test_gpt_oss_template_is_harmony(fixtures_dir):
    assert is_harmony((fixtures_dir / "templates" / "openai-gpt-oss-120b.jinja").read_text())
    assert not is_harmony((fixtures_dir / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text())


def test_harmony_template_renders_the_tools_and_calls_are_read_as_messages(fixtures_dir):
    from llamay.chat.template import ChatTemplate
    from llamay.toolcall.plan import plan
    source = (fixtures_dir / "templates" / "openai-gpt-oss-120b.jinja").read_text()
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    p = plan(source, messages, tools, tokenizer=None, choice="auto")
    assert p.tools == tools and p.fmt is None and p.lark is None
    text = ChatTemplate(source).render(p.messages, tools=p.tools, add_generation_prompt=True)
    assert "namespace functions" in text and "get_weather" in text and text.endswith("<|start|>assistant")


def test_the_server_reads_a_harmony_template_as_harmony(fixtures_dir):
    from llamay.server.stream import reader_for
    oss = (fixtures_dir / "templates" / "openai-gpt-oss-120b.jinja").read_text()
    qwen = (fixtures_dir / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text()
    r = reader_for(oss, None)
    assert isinstance(r, HarmonyReader)
    assert r.feed(REASON + "<|start|>assistant<|channel|>final<|message|>Hi")[:2] == ("Hi", "User asks weather. Use tool.")
    assert not isinstance(reader_for(qwen, None), HarmonyReader)
