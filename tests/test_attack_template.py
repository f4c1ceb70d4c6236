"""Hostile chat templates (untrusted jinja from a downloaded GGUF): every attack ends in a ChatTemplateError naming
what stopped it, within a bounded time and memory, through the public path (template_for + prompt_ids); a render
can be cancelled from another thread; real templates render exactly as a plain jinja sandbox renders them."""
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.sandbox
import pytest

from llamay.chat import (ChatTemplate, ChatTemplateCancelled, ChatTemplateError, ChatTemplateLimit, RenderLimits,
                         prompt_ids, template_for)
from llamay.chat.template import _GenerationTag
from llamay.toolcall.polyfill import TemplateCaps, caps

SHARED = Path(os.environ.get("LLAMAY_SHARED", Path(__file__).resolve().parent.parent.parent / "shared"))
TEMPLATES = sorted((SHARED / "fixtures" / "templates").glob("*.jinja"))
EXTRAS = {"fireworks-ai-llama-3-firefunction-v2.jinja": {"functions": "[]", "datetime": "2024-06-01"}}
MESSAGES = [{"role": "user", "content": "hello"}]
BOUND_S = 120.0  # every attack ends within this, however loaded the machine (the time limit is 2 s)
BOUND_BYTES = 400 * 2**20  # peak Python allocation of a memory attack (the allocation limit is 256 MiB)

STEPS = "ran past its limit of 1,000,000 loop steps"
TIME = "ran past its 2 s limit"
CHARS = "built a string over its limit of 4,194,304 characters"
ITEMS = "built a value over its limit of 1,000,000 items"
BITS = "computed a number over its limit of 65,536 bits"
MEMORY = "allocated past its limit of 256 MiB"
NESTING = "nests blocks or brackets past its limit of 64 levels"
DEPTH = "nested a value past its limit of 256 levels"
RECURSION = "nests or recurses too deeply"
DOUBLE_NS = "{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}"


class ByteTokenizer:
    """Token = byte; 256 is BOS, 257 EOS."""
    bos_id, eos_id = 256, 257

    def piece(self, token: int) -> bytes:
        return {256: b"<s>", 257: b"</s>"}.get(token, bytes([token % 256]))

    def encode(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return [256] * add_special + list(text.encode())


TOKENIZER = ByteTokenizer()

ATTACKS = {  # name: (template source, what stops it)
    "nested_loop_99999_squared": ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
                                  STEPS),
    "huge_power": ("{{ 10 ** (10 ** 10) }}", BITS),
    "huge_power_via_variable": ("{% set x = 10 ** 10 %}{{ 10 ** x }}", BITS),
    "repeated_squaring": ("{% set ns = namespace(n=3) %}{% for i in range(64) %}{% set ns.n = ns.n * ns.n %}"
                          "{% endfor %}", BITS),
    "output_of_1e7_pieces": ("{% for i in range(10000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}",
                             STEPS),
    "output_over_the_size_limit": ("{{ 'x' * 4000000 }}{{ 'x' * 4000000 }}", CHARS),
    "string_doubling_tilde": ("{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                              "{% endfor %}", CHARS),
    "string_doubling_plus": ("{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
                             "{% endfor %}", CHARS),
    "string_doubling_through_macro_args": ("{% macro m(s, n) %}{{ m(s ~ s, n - 1) if n else s|length }}"
                                           "{% endmacro %}{{ m('a', 64) }}", CHARS),
    "string_times_3e8": ("{{ 'a' * 300000000 }}", CHARS),
    "list_times_1e8": ("{{ ([0] * 100000000)|length }}", ITEMS),
    "range_of_1e7": ("{{ range(10000000)|list|length }}", ITEMS),
    "nested_if_5000": ("{% if true %}" * 5000 + "x" + "{% endif %}" * 5000, NESTING),
    "nested_parentheses_5000": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", NESTING),
    "nested_lists_5000": ("{{ " + "[" * 5000 + "1" + "]" * 5000 + " }}", NESTING),
    "shared_lists_printed": (DOUBLE_NS + "{{ ns.x }}", ITEMS),
    "shared_lists_compared": (DOUBLE_NS + "{% set ns2 = namespace(y=[1]) %}{% for i in range(64) %}"
                              "{% set ns2.y = [ns2.y, ns2.y] %}{% endfor %}{{ ns.x == ns2.y }}", ITEMS),
    "shared_lists_as_json": (DOUBLE_NS + "{{ ns.x|tojson }}", ITEMS),
    "shared_lists_joined": (DOUBLE_NS + "{{ ns.x|join(',') }}", ITEMS),
    "deep_tuple_hashed": ("{% set ns = namespace(t=()) %}{% for i in range(1000) %}{% set ns.t = (ns.t,) %}"
                          "{% endfor %}{{ {ns.t: 1}|length }}", DEPTH),
    "deep_tuple_looked_up": ("{% set ns = namespace(t=()) %}{% for i in range(1000) %}{% set ns.t = (ns.t,) %}"
                             "{% endfor %}{{ ns.t in {} }}", DEPTH),
    "many_large_strings_kept": ("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                                "{% set _ = ns.l.append('ab' * 2000000 ~ i) %}{% endfor %}", MEMORY),
    "block_buffer_of_new_strings": ("{% set s = 'ab' * 30000 %}{% set x %}{% for i in range(1000000) %}"
                                    "{{ s + 'x' }}{% endfor %}{% endset %}{{ x|length }}", MEMORY),
    "split_into_many_strings": ("{% set s = ' ab' * 1300000 %}{{ s.split()|length }}", ITEMS),
    "format_width": ("{{ '{:>999999999}'.format('a') }}", CHARS),
    "format_repeated_field": ("{{ ('{0}' * 1000).format('a' * 100000) }}", CHARS),
    "printf_width": ("{{ '%999999999d' % 1 }}", CHARS),
    "printf_repeated_argument": ("{{ ('%s' * 1000) % (('a' * 100000,) * 1000) }}", CHARS),
    "format_filter_width": ("{{ '%999999999s'|format('a') }}", CHARS),
    "replace_empty_with_large": ("{% set s = 'a' * 1000000 %}{{ s|replace('', s) }}", CHARS),
    "replace_method": ("{% set s = 'a' * 1000000 %}{{ s.replace('a', s) }}", CHARS),
    "join_with_large_separator": ("{% set s = 'a' * 1000000 %}{{ s.join(['x'] * 100) }}", CHARS),
    "join_filter_of_references": ("{% set s = 'a' * 1000000 %}{{ ([s] * 100)|join }}", CHARS),
    "ljust": ("{{ 'a'.ljust(1000000000) }}", CHARS),
    "center_filter": ("{{ 'a'|center(1000000000) }}", CHARS),
    "indent_filter": ("{{ ('a\n' * 100000)|indent(1000) }}", CHARS),
    "expandtabs": ("{{ ('\t' * 1000).expandtabs(100000) }}", CHARS),
    "list_sum": ("{% set x = [0] * 1000 %}{{ ([x] * 10000)|sum(start=[])|length }}", ITEMS),
    "batch_fill": ("{{ [1]|batch(1000000000, 0)|list }}", ITEMS),
    "wordwrap_with_large_wrapstring": ("{{ ('a ' * 100000)|wordwrap(1, wrapstring='x' * 1000) }}", CHARS),
    "macro_recursing_forever": ("{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}", RECURSION),
    "macro_calls_doubling": ("{% macro m(n) %}{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}"
                             "{{ m(60) }}", TIME),
    "recursive_loop_forever": ("{% for x in [1] recursive %}{{ loop([1, 1]) }}{% endfor %}", RECURSION),
    "mixed_normal_prefix_then_doubling_in_loops": ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                                                   "{% endfor %}{% set ns = namespace(s='x') %}"
                                                   "{% for i in range(99999) %}{% for j in range(99999) %}"
                                                   "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% endfor %}", CHARS),
    "mixed_power_in_a_macro_in_a_loop": ("{% macro p(n) %}{{ 2 ** n }}{% endmacro %}{% for i in range(10) %}"
                                         "{{ p(10 ** i) }}{% endfor %}", BITS),
    "mixed_shared_lists_in_a_macro_output": ("{% macro show(x) %}{{ x }}{% endmacro %}" + DOUBLE_NS
                                             + "{% for i in range(3) %}{{ show(ns.x) }}{% endfor %}", ITEMS),
}


def _render(source: str, messages: list[dict] = MESSAGES, cancel: threading.Event | None = None) -> list[int]:
    template = template_for({"tokenizer.chat_template": source}, TOKENIZER)
    return prompt_ids(template, TOKENIZER, messages, cancel=cancel)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_ends_in_its_limit_error(name):
    """Each attack trips the limit named for it. An attack meant for a counting limit (steps, characters,
    items, bits, memory, nesting) renders without the wall-clock limit, so a loaded machine cannot make the
    2 s limit fire first; BOUND_S only catches one that never ends."""
    source, limit = ATTACKS[name]
    started = time.monotonic()
    with pytest.raises(ChatTemplateError) as info:
        if limit == TIME:
            _render(source)
        else:
            ChatTemplate(source, limits=RenderLimits(seconds=BOUND_S)).render(MESSAGES)
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert limit in message, message
    assert message.startswith("the chat template ") and "\n" not in message and len(message) <= 300
    assert not info.value.deliberate
    assert isinstance(info.value, ChatTemplateLimit) == (limit != RECURSION)
    assert elapsed < BOUND_S, f"{name} took {elapsed:.1f} s"


@pytest.mark.parametrize("name", ["string_times_3e8", "list_times_1e8", "many_large_strings_kept",
                                  "block_buffer_of_new_strings", "printf_repeated_argument",
                                  "replace_empty_with_large", "shared_lists_printed", "string_doubling_tilde"])
def test_memory_attack_peak_stays_bounded(name):
    tracemalloc.start()
    try:
        with pytest.raises(ChatTemplateLimit):
            _render(ATTACKS[name][0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BOUND_BYTES, f"{name}: peak {peak >> 20} MiB"


def test_time_limit_is_a_named_constant_of_the_template():
    fast = ChatTemplate(ATTACKS["macro_calls_doubling"][0], limits=RenderLimits(seconds=0.2))
    with pytest.raises(ChatTemplateLimit, match=r"^the chat template ran past its 0\.2 s limit$"):
        fast.render([])


@pytest.mark.parametrize("source", [
    "{{ 1" + " + 1" * 5000 + " }}", "{{ " + "not " * 5000 + "1 }}", "{{ messages" + ".a" * 5000 + " }}",
    "{{ messages" + "[0]" * 5000 + " }}", "{{ 'x'" + "|string" * 5000 + " }}", "{{ " + "-" * 5000 + "1 }}",
])
def test_deep_expressions_fail_to_compile_in_a_worker_thread(source):
    # the server compiles in asyncio.to_thread; the compiler's recursion must end in an error, not a crash
    def compile_error() -> str:
        try:
            ChatTemplate(source)
        except ChatTemplateError as e:
            return str(e)
        return "compiled"
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(compile_error).result() == "the chat template nests too deeply to compile"


def test_source_over_the_size_limit_is_refused():
    with pytest.raises(ChatTemplateLimit, match="^the chat template is over its limit of 131,072 characters$"):
        ChatTemplate("x" * (128 * 1024 + 1))


@pytest.mark.parametrize("source", ["{{ lipsum(1000000) }}", "{{ ('a ' * 1000000)|urlize }}",
                                    "{{ messages|pprint }}"])
def test_generators_and_slow_formatters_are_not_offered(source):
    # lipsum writes paragraphs of any number; urlize and pprint run for seconds in Python on big input
    with pytest.raises(ChatTemplateError, match="undefined|No filter named"):
        _render(source)


def test_huge_power_chain_is_left_associative_and_renders():
    # jinja reads 10 ** 10 ** 10 as (10 ** 10) ** 10 = 10 ** 100: small, so it renders
    assert ChatTemplate("{{ 10 ** 10 ** 10 }}").render([]) == str(10**100)


def test_int_to_str_digit_limit_is_a_template_error():
    with pytest.raises(ChatTemplateError, match=r"^chat template failed at line 1: ValueError: Exceeds the limit "
                                                r"\(4300 digits\)") as info:
        _render("{{ (10 ** 5000)|string }}")
    assert not isinstance(info.value, ChatTemplateLimit)


def test_deep_tuple_hash_past_the_c_stack_is_refused_without_crashing():
    # CPython's tuple hash recurses in C without a depth check: 300,000 levels overflow the stack (SIGSEGV).
    # A subprocess, so that a regression fails this test instead of killing the run.
    code = ("from llamay.chat import ChatTemplate, RenderLimits\n"
            "src = ('{% set ns = namespace(t=()) %}{% for i in range(300000) %}{% set ns.t = (ns.t,) %}'\n"
            "       '{% endfor %}{{ {ns.t: 1} }}')\n"
            "try:\n"
            "    ChatTemplate(src, limits=RenderLimits(seconds=60)).render([])\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"ChatTemplateLimit the chat template {DEPTH}"


def test_cancel_from_another_thread_stops_a_never_ending_render():
    """Only the cancel can end it (no wall-clock limit within BOUND_S): the error says it was cancelled."""
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    template = ChatTemplate(ATTACKS["macro_calls_doubling"][0], limits=RenderLimits(seconds=BOUND_S))
    started = time.monotonic()
    timer.start()
    with pytest.raises(ChatTemplateCancelled, match="^the chat template render was cancelled$"):
        prompt_ids(template, TOKENIZER, MESSAGES, cancel=cancel)
    assert time.monotonic() - started >= 0.2  # not before the cancel


def test_cancel_stops_a_loop_that_writes_nothing():
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    source = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    template = ChatTemplate(source, limits=RenderLimits(loop_steps=10**12, seconds=60))
    timer.start()
    with pytest.raises(ChatTemplateCancelled):  # not the 60 s limit, nor the 10^12 steps
        template.render([], cancel=cancel)


def test_never_ending_renders_do_not_starve_a_normal_one():
    # as in the server: renders share a small pool of worker threads; seven hostile ones used to hold them all
    hostile = ChatTemplate(ATTACKS["macro_calls_doubling"][0], limits=RenderLimits(seconds=0.5))
    normal = ChatTemplate("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    with ThreadPoolExecutor(4) as pool:
        attacks = [pool.submit(hostile.render, MESSAGES) for _ in range(7)]
        answer = pool.submit(normal.render, MESSAGES)
        assert answer.result(timeout=BOUND_S) == "[hello]"  # each hostile render gave its worker back
        assert all(isinstance(attack.exception(), ChatTemplateLimit) for attack in attacks)


def test_an_unset_cancel_event_changes_nothing():
    text = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    assert _render(text, cancel=threading.Event()) == [256] + list(b"[hello]")


def test_render_limits_leave_caller_data_and_later_renders_alone():
    template = ChatTemplate(ATTACKS["string_doubling_tilde"][0] + "{{ messages[0].content }}")
    for _ in range(2):  # a tripped budget is per render
        with pytest.raises(ChatTemplateLimit):
            template.render(MESSAGES)
    assert ChatTemplate("{{ messages[0].content }}").render(MESSAGES) == "hello"


def test_probing_a_never_ending_template_stops_at_the_first_limit(monkeypatch):
    source = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    renders, render = [], ChatTemplate.render

    def counted(self, *args, **kwargs):
        renders.append(1)
        return render(self, *args, **kwargs)
    monkeypatch.setattr(ChatTemplate, "render", counted)
    found = caps(source + "{# probe #}")  # a source caps() has not cached yet
    assert found == TemplateCaps()  # nothing is supported
    assert len(renders) == 1  # not once per probe (a dozen of them)


GROWING = "{% set ns = namespace(s='') %}{% macro m(n, kept) %}{% set ns.s = ns.s ~ ('x' * 100000) %}"


def test_a_namespace_attribute_overwritten_refunds_the_value_it_frees():
    # each level allocates ns.s anew (46 MB over 30 levels), but frees the old one: 3 MB live at most
    template = ChatTemplate(GROWING + "{{ m(n - 1, '') if n }}{% endmacro %}{{ m(30, '') }}{{ ns.s|length }}",
                            limits=RenderLimits(created_bytes=16 * 2**20))
    assert template.render([]) == "3100000"


def test_a_value_still_referenced_elsewhere_is_not_refunded():
    # the same, but every old ns.s stays alive in a macro frame: the allocations add up to the limit
    template = ChatTemplate(GROWING + "{{ m(n - 1, ns.s) if n }}{% endmacro %}{{ m(30, '') }}{{ ns.s|length }}",
                            limits=RenderLimits(created_bytes=16 * 2**20))
    with pytest.raises(ChatTemplateLimit, match="^the chat template allocated past its limit of 16 MiB$"):
        template.render([])


def _reference_environment() -> jinja2.Environment:
    """HF transformers' apply_chat_template environment as llamay had it before the limits: plain jinja."""
    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys, default=list)

    def raise_exception(message):
        raise jinja2.TemplateError(str(message))

    env = jinja2.sandbox.SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                              extensions=[jinja2.ext.loopcontrols, _GenerationTag])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    return env


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "City name"}}}}}]
CALL = [{"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a1b2c3d4e", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "sunny"}, {"role": "user", "content": "thanks"}]
LONG = [m for i in range(40) for m in ({"role": "user", "content": f"question {i} " * 20},
                                       {"role": "assistant", "content": f"answer {i} " * 40})]
LONG.append({"role": "user", "content": "last"})
CONVERSATIONS = [(LONG, None), ([{"role": "system", "content": "be brief"}, *LONG], None), (CALL, TOOLS),
                 (LONG[-3:], TOOLS)]


@pytest.fixture(scope="module")
def reference():
    return _reference_environment()


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_real_template_renders_exactly_as_plain_jinja(path, reference):
    source = path.read_text()
    try:
        expected_template = reference.from_string(source)
    except jinja2.TemplateSyntaxError:
        pytest.skip("plain jinja cannot compile it either")
    template = ChatTemplate(source, bos_token="<BOS>", eos_token="<EOS>")
    n_rendered = 0
    for messages, tools in CONVERSATIONS:
        variables = {"bos_token": "<BOS>", "eos_token": "<EOS>", **EXTRAS.get(path.name, {}),
                     "messages": messages, "add_generation_prompt": True, "tools": tools}
        try:
            expected = expected_template.render(**variables)
        except Exception:  # a template that refuses these messages
            with pytest.raises(ChatTemplateError):
                template.render(messages, tools=tools, **EXTRAS.get(path.name, {}))
            continue
        assert template.render(messages, tools=tools, **EXTRAS.get(path.name, {})) == expected
        n_rendered += 1
    assert n_rendered, "no conversation rendered: the comparison proved nothing"


def test_template_building_its_prompt_by_concatenation_renders_a_long_conversation(reference):
    # Reka Edge's template appends every piece to ns.out: its allocations are quadratic in the prompt's
    # length (~800 MB here), but each old ns.out is freed at once, which the budget counts back. Rendered
    # without the wall-clock limit (as the counting attacks are): on a loaded machine it takes over 2 s.
    source = (SHARED / "fixtures" / "templates" / "Reka-Edge.jinja").read_text()
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 500} for i in range(301)]
    expected = reference.from_string(source).render(messages=messages, add_generation_prompt=True, tools=None,
                                                    bos_token="", eos_token="")
    assert len(expected) > 1_000_000
    assert ChatTemplate(source, limits=RenderLimits(seconds=BOUND_S)).render(messages) == expected
