"""Tool polyfills: every fixture template (llama-cpp-python's collection) renders tools, a call and its result
after adapt(); capabilities found by probing match minja's published expectations."""
import functools
import json
import os
import re
from pathlib import Path

import pytest

from llamay.chat.template import CHATML_SOURCE, ChatTemplate, ChatTemplateError
from llamay.toolcall.polyfill import TemplateCaps, adapt, caps, tools_prompt

# parametrisation needs the paths at collection time, so this repeats conftest's lookup of shared/
SHARED = Path(os.environ.get("LLAMAY_SHARED", Path(__file__).resolve().parent.parent.parent / "shared"))
TEMPLATE_DIR = SHARED / "fixtures" / "templates"
TEMPLATES = sorted(TEMPLATE_DIR.glob("*.jinja"))
# Variables a template reads without a default, named by the template source itself.
EXTRAS = {"fireworks-ai-llama-3-firefunction-v2.jinja": {"functions": "[]", "datetime": "2024-06-01"}}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "City name"}}}}}]
CALL_ID = "call_Xq3vB7nK2mP9sT4wL6yR8dF1"  # the engine's shape: "call_" + 24 alphanumerics
SYSTEM = {"role": "system", "content": "SYS-alpha-7"}
QUESTION = {"role": "user", "content": "How warm is it in the French capital?"}  # "Paris" only in the call
RESULT = "18 degrees and sunny"
FOLLOW_UP = {"role": "user", "content": "USER-delta-3"}
# Mistral templates refuse a user turn right after a tool result (their own alternation rule)
REPLY = {"role": "assistant", "content": "ASSISTANT-echo-4"}


def _conversation(arguments, system: bool = True, reply: bool = False) -> list[dict]:
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}
    result = {"role": "tool", "tool_call_id": CALL_ID, "content": RESULT}
    return [*([SYSTEM] if system else []), QUESTION, call, result, *([REPLY] if reply else []), FOLLOW_UP]


@functools.cache
def _template(path: Path) -> ChatTemplate:
    return ChatTemplate(path.read_text(), bos_token="<BOS>", eos_token="<EOS>")


def _caps(path: Path) -> TemplateCaps:
    return caps(path.read_text(), EXTRAS.get(path.name))


def _render(path: Path, messages: list[dict], tools=TOOLS) -> str:
    return _template(path).render(adapt(_caps(path), messages, tools), tools=tools, **EXTRAS.get(path.name, {}))


def _render_tolerating_refusals(path: Path, arguments) -> str:
    """Falls back only where the template deliberately refuses the conversation's shape: a user turn right
    after a tool result (alternation), or a system role."""
    source = path.read_text()
    for system, reply in ((True, False), (True, True), (False, False), (False, True)):
        try:
            return _render(path, _conversation(arguments, system, reply))
        except ChatTemplateError as e:
            assert e.deliberate and str(e) in source, f"not a raise_exception from the template: {e}"
            assert "alternate" in str(e) or "ystem" in str(e), str(e)
    pytest.fail("every variant of the conversation was refused")


def test_fixture_templates_are_present():
    assert len(TEMPLATES) >= 60


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_renders_tools_call_and_result(path):
    text = _render_tolerating_refusals(path, {"city": "Paris"})
    for needle in ("get_weather", "Paris", RESULT, QUESTION["content"], FOLLOW_UP["content"]):
        assert needle in text, f"{needle!r} missing with {_caps(path)} in:\n{text}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_string_arguments_render_as_objects(path):
    as_text = _render_tolerating_refusals(path, '{"city": "Paris"}')
    assert as_text == _render_tolerating_refusals(path, {"city": "Paris"})


def test_object_arguments_are_required_somewhere_and_strings_break_there():
    # the templates that need mappings really fail (or escape) with JSON text when not adapted
    needing = [path for path in TEMPLATES if _caps(path).requires_object_arguments]
    assert len(needing) >= 10
    for path in needing:
        messages = _conversation('{"city": "Paris"}', reply=True)
        try:
            text = _template(path).render(messages, tools=TOOLS, **EXTRAS.get(path.name, {}))
        except ChatTemplateError:
            continue
        assert '"Paris"' not in text or '\\"Paris\\"' in text, path.name


# ref: google/minja tests/test-capabilities.cpp (expected caps of the same templates in llama.cpp's engine):
# (system role, tools, tool calls, tool responses, parallel tool calls, requires object arguments)
MINJA = {
    "Qwen-QwQ-32B": (True, True, True, True, True, True),
    "meta-llama-Llama-3.1-8B-Instruct": (True, True, True, True, False, True),
    "meta-llama-Llama-3.2-3B-Instruct": (True, True, True, True, False, True),
    "meta-llama-Llama-3.3-70B-Instruct": (True, True, True, True, False, True),
    "mistralai-Mistral-Nemo-Instruct-2407": (True, True, True, True, True, True),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": (True, True, True, True, True, False),
    "CohereForAI-c4ai-command-r-plus-tool_use": (True, True, True, True, True, True),
    "meetkai-functionary-medium-v3.2": (True, True, True, True, True, False),
}


@pytest.mark.parametrize("stem", sorted(MINJA))
def test_caps_match_minja(stem):
    found = _caps(TEMPLATE_DIR / f"{stem}.jinja")
    assert (found.supports_system_role, found.supports_tools, found.supports_tool_calls,
            found.supports_tool_responses, found.supports_parallel_tool_calls,
            found.requires_object_arguments) == MINJA[stem]


@pytest.mark.parametrize("stem", ["Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"])
def test_qwen_and_hermes_support_everything(stem):
    found = _caps(TEMPLATE_DIR / f"{stem}.jinja")
    assert found.supports_system_role and found.supports_tools and found.supports_tool_calls
    assert found.supports_tool_responses and found.supports_parallel_tool_calls


def test_gemma2_and_chatml_support_no_tools():
    gemma = _caps(TEMPLATE_DIR / "google-gemma-2-2b-it.jinja")
    chatml = caps(CHATML_SOURCE)
    for found in (gemma, chatml):
        assert not (found.supports_tools or found.supports_tool_calls or found.supports_tool_responses)
    assert not gemma.supports_system_role and gemma.requires_alternating_roles  # it raises on both
    assert chatml.supports_system_role


def test_functionary_v32_and_r1_distill_llama_need_json_text_arguments():
    # both concatenate the arguments to a string (`'...' + arguments`), so a mapping breaks them
    for stem in ("meetkai-functionary-medium-v3.2", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"):
        path = TEMPLATE_DIR / f"{stem}.jinja"
        assert re.search(r"\+ (tool_call|tool)\['function'\]\['arguments'\]", path.read_text())
        assert _caps(path).requires_string_arguments
        assert '{"city": "Paris"}' in _render_tolerating_refusals(path, {"city": "Paris"})


def test_mistral_nemo_gets_stable_nine_character_ids():
    path = TEMPLATE_DIR / "mistralai-Mistral-Nemo-Instruct-2407.jinja"
    assert _caps(path).requires_short_call_ids
    adapted = adapt(_caps(path), _conversation({"city": "Paris"}, reply=True), TOOLS)
    call_id = adapted[2]["tool_calls"][0]["id"]
    assert re.fullmatch(r"[A-Za-z0-9]{9}", call_id) and adapted[3]["tool_call_id"] == call_id
    assert adapt(_caps(path), _conversation({"city": "Paris"}), TOOLS)[2]["tool_calls"][0]["id"] == call_id
    assert _render(path, _conversation({"city": "Paris"}, reply=True)).count(f'"{call_id}"') == 2


def test_llama31_parallel_calls_become_text():
    # Llama 3.1 raises "This model only supports single tool-calls at once!" on two calls in one turn
    path = TEMPLATE_DIR / "meta-llama-Llama-3.1-8B-Instruct.jinja"
    messages = _conversation({"city": "Paris"})
    second = {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    messages[2] = {**messages[2], "tool_calls": [*messages[2]["tool_calls"], second]}
    with pytest.raises(ChatTemplateError, match="single tool-calls"):
        _template(path).render(messages, tools=TOOLS)
    text = _render(path, messages)
    assert "Paris" in text and "Oslo" in text


def test_kimi_k2_renders_its_calls_natively():
    # its template appends to a list it created (allowed); caller data stays immutable (test_chat_template)
    path = TEMPLATE_DIR / "Kimi-K2-Instruct.jinja"
    assert ".append(" in path.read_text() and _caps(path).supports_tool_calls
    assert '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}' in _render(
        path, _conversation({"city": "Paris"}))


NO_TOOLS = TemplateCaps(supports_system_role=True)


def test_generic_call_and_result_forms():
    messages = [QUESTION, {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": RESULT}]
    adapted = adapt(NO_TOOLS, messages, None)
    assert json.loads(adapted[1]["content"]) == {
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}], "content": "Checking."}
    assert "tool_calls" not in adapted[1]
    assert adapted[2] == {"role": "user", "content": json.dumps(
        {"tool_response": {"tool": "get_weather", "content": RESULT}})}
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # input untouched


def test_result_without_id_answers_the_oldest_open_call():
    calls = [{"type": "function", "function": {"name": name, "arguments": "{}"}} for name in ("a_fn", "b_fn")]
    messages = [QUESTION, {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}]
    adapted = adapt(NO_TOOLS, messages, None)
    assert [json.loads(m["content"])["tool_response"]["tool"] for m in adapted[2:]] == ["a_fn", "b_fn"]


def test_unparseable_arguments_stay_text():
    found = TemplateCaps(supports_tool_calls=True)
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "not json {"}}]}
    assert adapt(found, [message], None)[0]["tool_calls"][0]["function"]["arguments"] == "not json {"


def test_non_null_content_where_required():
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}]}
    assert adapt(TemplateCaps(supports_tool_calls=True, requires_non_null_content=True), [message],
                 None)[0]["content"] == ""
    assert adapt(TemplateCaps(supports_tool_calls=True), [message], None)[0]["content"] is None


def test_tools_prompt_merges_into_system_and_names_both_forms():
    adapted = adapt(NO_TOOLS, [SYSTEM, QUESTION], TOOLS)
    assert len(adapted) == 2 and adapted[0]["content"].startswith(SYSTEM["content"] + "\n\n")
    text = adapted[0]["content"]
    assert json.dumps(TOOLS[0]["function"]) in text
    assert '{"tool_calls": [{"name": ' in text and '{"response": ' in text
    prepended = adapt(NO_TOOLS, [QUESTION], TOOLS)
    assert prepended[0] == {"role": "system", "content": tools_prompt(TOOLS)} and prepended[1] == QUESTION


def test_system_folds_into_first_user_without_system_role():
    adapted = adapt(TemplateCaps(), [SYSTEM, QUESTION], None)
    assert adapted == [{"role": "user", "content": SYSTEM["content"] + "\n\n" + QUESTION["content"]}]
