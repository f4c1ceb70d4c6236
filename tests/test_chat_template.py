"""Chat templates: every fixture template (llama-cpp-python's collection) renders a plain conversation."""
import functools
import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from llamay.chat import ChatTemplate, ChatTemplateError, default_template
from llamay.gguf import GGUFReader

# parametrisation needs the paths at collection time, so this repeats conftest's lookup of shared/
SHARED = Path(os.environ.get("LLAMAY_SHARED", Path(__file__).resolve().parent.parent.parent / "shared"))
TEMPLATE_DIR = SHARED / "fixtures" / "templates"
TEMPLATES = sorted(TEMPLATE_DIR.glob("*.jinja"))

SYSTEM = {"role": "system", "content": "SYS-alpha-7"}
TURNS = [
    {"role": "user", "content": "USER-bravo-1"},
    {"role": "assistant", "content": "ASSISTANT-charlie-2"},
    {"role": "user", "content": "USER-delta-3"},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "City name"}}}}}]
# Variables a template reads without a default, named by the template source itself.
EXTRAS = {"fireworks-ai-llama-3-firefunction-v2.jinja": {"functions": "[]", "datetime": "2024-06-01"}}


@functools.cache
def _compiled(path: Path) -> ChatTemplate:
    return ChatTemplate(path.read_text(), bos_token="<BOS>", eos_token="<EOS>")  # ~80 ms each


def _render(path: Path, messages: list[dict]) -> str:
    # "*-tool_use" variants iterate over `tools` unconditionally; they are only defined with tools
    return _render_with(path, messages, TOOLS if path.stem.endswith("tool_use") else None)


def _render_with(path: Path, messages: list[dict], tools: list[dict] | None) -> str:
    return _compiled(path).render(messages, tools=tools, **EXTRAS.get(path.name, {}))


def _assert_contents_in_order(text: str, messages: list[dict]) -> None:
    position = 0
    for message in messages:
        found = text.find(message["content"], position)
        assert found >= 0, f"{message['content']!r} missing (or out of order) in:\n{text}"
        position = found + len(message["content"])


def test_fixture_templates_are_present():
    assert len(TEMPLATES) >= 60


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_renders_without_system(path):
    _assert_contents_in_order(_render(path, TURNS), TURNS)


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_renders_with_system_or_refuses_deliberately(path):
    messages = [SYSTEM, *TURNS]
    try:
        text = _render(path, messages)
    except ChatTemplateError as e:
        source = path.read_text()
        assert e.deliberate, f"not a raise_exception from the template: {e}"
        assert "raise_exception" in source and str(e) in source, str(e)
        return
    assert SYSTEM["content"] in text  # some templates fold the system text into the last user turn
    _assert_contents_in_order(text, TURNS)


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_renders_with_tools(path):
    _assert_contents_in_order(_render_with(path, TURNS, TOOLS), TURNS)


def test_gemma2_refuses_system_role_with_its_message():
    path = TEMPLATE_DIR / "google-gemma-2-2b-it.jinja"
    assert "raise_exception('System role not supported')" in path.read_text()
    with pytest.raises(ChatTemplateError, match="^System role not supported$") as info:
        _render(path, [SYSTEM, *TURNS])
    assert info.value.deliberate


def test_raise_exception_carries_message():
    template = ChatTemplate("{{ raise_exception('roles must alternate: ' ~ messages[0].role) }}")
    with pytest.raises(ChatTemplateError) as info:
        template.render([{"role": "tool", "content": ""}])
    assert str(info.value) == "roles must alternate: tool" and info.value.deliberate


def test_syntax_error_at_construction_names_problem():
    with pytest.raises(ChatTemplateError, match=r"syntax error, line 2: .*endfor") as info:
        ChatTemplate("{% for m in messages %}\n{{ m.content }}{% endif %}")
    assert not info.value.deliberate


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ raise_exception.__globals__.json }}",
    "{{ cycler.__init__.__globals__.os }}",
])
def test_sandbox_blocks_internals(source):
    with pytest.raises(ChatTemplateError, match="sandbox|unsafe") as info:
        ChatTemplate(source).render([])
    assert not info.value.deliberate


@pytest.mark.parametrize("source", ["{{ ''.__class__ }}", "{{ raise_exception.__globals__ }}"])
def test_sandbox_renders_unsafe_attribute_as_nothing(source):
    # jinja's sandbox turns one unsafe lookup into an Undefined that prints empty and fails on use
    assert ChatTemplate(source).render([]) == ""


def test_sandbox_blocks_mutating_caller_data():
    messages = [{"role": "user", "content": "x"}]
    with pytest.raises(ChatTemplateError, match="sandbox|unsafe"):
        ChatTemplate("{{ messages.append({'role': 'system'}) }}").render(messages)
    assert messages == [{"role": "user", "content": "x"}]


def test_variables_and_defaults():
    template = ChatTemplate("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is none }}"
                            "|{{ enable_thinking }}", bos_token="<s>", eos_token="</s>")
    assert template.render([], enable_thinking=False) == "<s>|</s>|True|True|False"
    assert template.render([], add_generation_prompt=False) == "<s>|</s>|False|True|"


def test_tojson_matches_json_dumps_without_ascii_escaping():
    value = {"name": "météo <b>&", "n": [1, 2.5, None, True]}
    template = ChatTemplate("{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n"
                            "{{ v | tojson(separators=(',', ':')) }}\n{{ v | tojson(sort_keys=true) }}")
    expected = [json.dumps(value, ensure_ascii=False), json.dumps(value, ensure_ascii=False, indent=2),
                json.dumps(value, ensure_ascii=False, separators=(",", ":")),
                json.dumps(value, ensure_ascii=False, sort_keys=True)]
    assert template.render([], v=value) == "\n".join(expected)


def test_tojson_serialises_mapped_sequences():
    assert ChatTemplate("{{ tools | map(attribute='function') | map(attribute='name') | tojson }}").render(
        [], tools=TOOLS) == '["get_weather"]'


def test_trim_and_lstrip_blocks():
    template = ChatTemplate("<a>\n    {% if true %}\n    x\n    {% endif %}\n</a>")
    assert template.render([]) == "<a>\n    x\n</a>"


def test_loop_controls_and_namespace():
    source = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'system' %}{% continue %}"
              "{% endif %}{% set ns.n = ns.n + 1 %}{% if ns.n == 2 %}{% break %}{% endif %}{% endfor %}"
              "{{ ns.n }}|{{ messages[0].get('missing', 'dflt') }}|{{ messages[1].content.strip().upper() }}")
    assert ChatTemplate(source).render([SYSTEM, *TURNS]) == "2|dflt|USER-BRAVO-1"


def test_strftime_now_is_todays_date_in_llama32_template():
    path = TEMPLATE_DIR / "meta-llama-Llama-3.2-3B-Instruct.jinja"
    assert 'strftime_now("%d %b %Y")' in path.read_text()
    dates = [datetime.now().strftime("%d %b %Y")]
    text = _render(path, TURNS)
    dates.append(datetime.now().strftime("%d %b %Y"))  # the render may straddle midnight
    assert any(f"Today Date: {date}" in text for date in dates)


def test_default_template_is_chatml_as_qwen_renders_it():
    # Qwen2.5's template with an explicit system message and no tools is plain ChatML
    messages = [SYSTEM, *TURNS]
    qwen = ChatTemplate((TEMPLATE_DIR / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text())
    for add in (True, False):
        assert default_template().render(messages, add_generation_prompt=add) == qwen.render(
            messages, add_generation_prompt=add)
    assert default_template().render(TURNS).endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_generation_tag_renders_its_body():
    # HF's {% generation %} (training masks) appears in LFM2.5 and Laguna templates
    template = ChatTemplate("{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}"
                            "{% endfor %}")
    assert template.render(TURNS) == "".join(f"[{m['content']}]" for m in TURNS)


@pytest.mark.model
def test_smollm2_file_template_is_chatml(smollm_path):
    metadata = GGUFReader(smollm_path).metadata
    template = ChatTemplate(metadata["tokenizer.chat_template"])
    assert template.render([SYSTEM, *TURNS]) == default_template().render([SYSTEM, *TURNS])
    assert template.render(TURNS).startswith("<|im_start|>system\nYou are a helpful AI assistant")
