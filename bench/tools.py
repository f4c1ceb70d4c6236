"""What tool-call grammars cost: compile time and per-token constraint cost vs a decode step.

Per model (SmolLM2 49k vocab; Gemma 3 270M 262k vocab when present):
- compile: per format and tool_choice, for 2 and 8 offered functions: Lark text build
  (toolcall.grammar.tool_grammar), Grammar.compile (llguidance parse + validation, cached per grammar text
  afterwards), and the per-request start: matcher() + the first mask;
- phases: a greedy decode with the grammar applied, timing per token the constraint (mask + apply +
  advance) and the decode step (ctx.extend of one token): free text under `auto` (hermes, before any
  trigger; prose, then HTML whose '<' may start the trigger), a forced hermes call under `required`, and
  the generic JSON form under `required`.
Prompts are the model's chat template over the tool plan's messages (tools described by the polyfill).
Usage: python bench/tools.py [--tokens 48] [--threads 2] [--no-gemma]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from dataclasses import dataclass, field

import numpy as np
from grammar import timed_step
from models import gemma_path, smollm_path

import llamay
from llamay.chat.prompt import prompt_ids, template_for
from llamay.engine import Sampler, SamplingParams
from llamay.grammar import Grammar
from llamay.grammar.tokenizer import ll_tokenizer
from llamay.toolcall.formats import FORMATS
from llamay.toolcall.grammar import _special_ids, tool_grammar
from llamay.toolcall.plan import plan


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


_STR = {"type": "string"}
_IATA = {"type": "string", "pattern": "^[A-Z]{3}$"}
_LANG = {"type": "string", "pattern": "^[a-z]{2}$"}
_CURRENCY = {"enum": ["USD", "EUR", "GBP", "JPY", "CHF"]}
TOOLS = [  # 8 functions; the first 2 are the small set
    _fn("get_weather", "Weather forecast for a city.", {
        "location": {"type": "string", "maxLength": 60},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}}, ["location", "days"]),
    _fn("search_flights", "Find flights between two airports.", {
        "origin": _IATA, "destination": _IATA, "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
        "passengers": {"type": "object", "properties": {
            "adults": {"type": "integer", "minimum": 1, "maximum": 9},
            "children": {"type": "integer", "minimum": 0, "maximum": 8}}, "required": ["adults"]},
        "cabin": {"enum": ["economy", "premium", "business", "first"]}}, ["origin", "destination", "date"]),
    _fn("send_email", "Send an email.", {
        "to": {"type": "array", "items": {"type": "string", "maxLength": 80}, "minItems": 1, "maxItems": 10},
        "subject": {"type": "string", "maxLength": 120}, "body": _STR,
        "priority": {"enum": ["low", "normal", "high"]}}, ["to", "subject", "body"]),
    _fn("create_event", "Add an event to the calendar.", {
        "title": _STR, "start": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}$"},
        "duration_minutes": {"type": "integer", "minimum": 5, "maximum": 480},
        "attendees": {"type": "array", "maxItems": 20, "items": {"type": "object", "properties": {
            "name": _STR, "email": _STR}, "required": ["name"]}},
        "reminder": {"type": "object", "properties": {
            "minutes_before": {"type": "integer", "minimum": 0, "maximum": 1440},
            "method": {"enum": ["popup", "email"]}}}}, ["title", "start"]),
    _fn("convert_currency", "Convert an amount between currencies.", {
        "amount": {"type": "number", "minimum": 0}, "from": _CURRENCY, "to": _CURRENCY},
        ["amount", "from", "to"]),
    _fn("search_products", "Search the product catalogue.", {
        "query": _STR, "filters": {"type": "object", "properties": {
            "category": {"enum": ["books", "electronics", "clothing", "garden"]},
            "price_max": {"type": "number", "minimum": 0}, "in_stock": {"type": "boolean"}}},
        "sort": {"enum": ["relevance", "price_asc", "price_desc", "rating"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50}}, ["query"]),
    _fn("set_thermostat", "Set a room's thermostat.", {
        "room": {"enum": ["living_room", "bedroom", "kitchen", "office"]},
        "temperature": {"type": "number", "minimum": 10, "maximum": 30},
        "mode": {"enum": ["heat", "cool", "auto", "off"]}}, ["room", "temperature"]),
    _fn("translate_text", "Translate text between languages.", {
        "text": _STR, "source_lang": _LANG, "target_lang": _LANG,
        "formality": {"enum": ["formal", "informal"]}}, ["text", "target_lang"]),
]
COMPILE_CASES = [(f, c) for f in FORMATS for c in ("auto", "required")]


@dataclass(frozen=True)
class Phase:
    label: str
    fmt: str
    choice: str
    question: str


PHASES = [
    Phase("auto: free text (hermes)", "hermes", "auto", "Write a short poem about autumn leaves."),
    # '<' starts the hermes trigger: the tokens after it cost a full mask (seen on Gemma's 262k vocab)
    Phase("auto: HTML text (hermes)", "hermes", "auto", "Write a minimal HTML page with a title and a paragraph."),
    Phase("required: hermes call", "hermes", "required", "What will the weather be in Paris for the next 3 days?"),
    Phase("required: generic JSON", "generic", "required",
          "What will the weather be in Paris for the next 3 days?"),
]


@dataclass
class Timings:
    mask: list[float] = field(default_factory=list)  # seconds per token
    constraint: list[float] = field(default_factory=list)  # mask + apply + advance
    decode: list[float] = field(default_factory=list)  # one ctx.extend([token])
    decode_cpu: list[float] = field(default_factory=list)  # this process's CPU seconds in that step


def ms(seconds: list[float], q: float = 0.5) -> float:
    return float(np.quantile(seconds, q)) * 1e3


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1e3


def compile_case(llm, fmt_name: str, choice: str, n_fn: int) -> tuple[int, float, float, float]:
    """-> (Lark chars, build ms, compile ms, matcher + first mask ms)."""
    text, t_build = timed(tool_grammar, FORMATS[fmt_name], TOOLS[:n_fn], choice, True, llm.tokenizer)
    grammar, t_compile = timed(Grammar.compile, llm.tokenizer, "lark", text)
    _, t_start = timed(lambda: grammar.matcher().allowed())
    return len(text), t_build, t_compile, t_start


def compile_table(llm):
    """One line per (format, choice, number of functions)."""
    print(f"  {'format':12s} {'choice':9s} {'n_fn':>4s} {'lark chars':>10s} {'build ms':>9s} {'compile ms':>10s} "
          f"{'matcher+mask ms':>15s}")
    for fmt_name, choice in COMPILE_CASES:
        for n_fn in (2, 8):
            try:
                n_chars, t_build, t_compile, t_start = compile_case(llm, fmt_name, choice, n_fn)
            except ValueError as e:  # GrammarError included: reported, the table goes on
                print(f"  {fmt_name:12s} {choice:9s} {n_fn:4d}  error: {str(e)[:80]}")
                continue
            print(f"  {fmt_name:12s} {choice:9s} {n_fn:4d} {n_chars:10d} {t_build:9.2f} {t_compile:10.1f} "
                  f"{t_start:15.2f}")


def prompt_for(llm, template, phase: Phase) -> list[int]:
    messages = [{"role": "user", "content": phase.question}]
    tool_plan = plan(template.source, messages, TOOLS, {"tool_choice": phase.choice}, llm.tokenizer)
    return prompt_ids(template, llm.tokenizer, tool_plan.messages, tools=tool_plan.tools)


def decode_phase(llm, template, phase: Phase, n_tokens: int) -> tuple[Timings, str, int]:
    """Greedy decode under the phase's grammar (8 tools, parallel calls allowed) until EOS, the grammar
    is done, or n_tokens -> timings, the generated text, the prompt length."""
    lark = tool_grammar(FORMATS[phase.fmt], TOOLS, phase.choice, True, llm.tokenizer)
    matcher = Grammar.compile(llm.tokenizer, "lark", lark).matcher()
    ids = prompt_for(llm, template, phase)
    ctx, sampler, out = llm.create_context(ids), Sampler(SamplingParams(temperature=0.0)), []
    eog, t = set(llm.tokenizer.eog_ids), Timings()
    logits = ctx.logits.copy()
    for _ in range(n_tokens):
        token, mask, constraint = timed_step(matcher, sampler, logits, ctx.tokens)
        if token in eog:
            break
        t.mask.append(mask)
        t.constraint.append(constraint)
        out.append(token)
        if matcher.is_done():
            break
        t0, c0 = time.perf_counter(), time.process_time()
        logits = ctx.extend([token]).copy()
        t.decode.append(time.perf_counter() - t0)
        t.decode_cpu.append(time.process_time() - c0)
    ctx.delete(cache=True)  # the next phase's prompt may share its prefix
    return t, llm.detokenize(out), len(ids)


def phase_table(llm, n_tokens: int):
    template = template_for(llm.metadata, llm.tokenizer)
    print(f"  {'phase':26s} {'prompt':>6s} {'n_tok':>5s} {'mask ms':>8s} {'constr ms':>9s} {'p90':>6s} "
          f"{'max':>6s} {'at':>3s} {'decode ms':>9s} {'cpu/wall':>8s} {'overhead':>8s} {'sum %':>6s}")
    texts = []
    for phase in PHASES:
        t, text, n_prompt = decode_phase(llm, template, phase, n_tokens)
        overhead = statistics.median(t.constraint) / statistics.median(t.decode)
        spread = f"{ms(t.constraint, 0.9):6.2f} {ms(t.constraint, 1):6.2f} {int(np.argmax(t.constraint)):3d}"
        print(f"  {phase.label:26s} {n_prompt:6d} {len(t.constraint):5d} {ms(t.mask):8.3f} {ms(t.constraint):9.3f} "
              f"{spread} {ms(t.decode):9.2f} {sum(t.decode_cpu) / sum(t.decode):8.2f} {overhead:8.1%} "
              f"{sum(t.constraint) / sum(t.decode):6.1%}")
        texts.append((phase.label, text))
    for label, text in texts:
        print(f"    {label}: {text[:110]!r}")


def run(label: str, path, n_tokens: int, threads: int):
    llm = llamay.load(path, threads=threads)
    _, t_tok = timed(ll_tokenizer, llm.tokenizer)
    _, t_specials = timed(_special_ids, llm.tokenizer)
    print(f"\n== {label}: n_vocab {llm.tokenizer.n_vocab}, once per tokenizer: LLTokenizer {t_tok:.0f} ms, "
          f"control-token scan {t_specials:.0f} ms")
    compile_table(llm)
    phase_table(llm, n_tokens)


def uptime() -> str:
    return subprocess.run(["uptime"], check=True, capture_output=True, text=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-gemma", action="store_true")
    args = parser.parse_args()
    print("load:", uptime())
    print("per token: median unless noted; constr = mask + apply + advance (p90, max, 'at' = index of the max "
          "token); overhead = median constr / median decode step; sum % = all constr / all decode;\n"
          "cpu/wall = this process's CPU time / wall time in decode steps (about --threads when it has the cores)")
    run("smollm2 (BPE, 49k)", smollm_path(), args.tokens, args.threads)
    if args.no_gemma:
        print("\n(gemma 3 270M skipped)")
    else:
        run("gemma3 (SPM, 262k)", gemma_path(), args.tokens, args.threads)
    print("load:", uptime())


if __name__ == "__main__":
    main()
