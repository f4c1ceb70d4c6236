"""Structured output: JSON Schema / GBNF / regex / Lark compiled once into per-sequence token masks
(llguidance, DESIGN.md §8). Pure bookkeeping: no tensor code. A client's grammar is checked against
limits.py, then compiled in a bounded worker (bounded.py), so none can crash, block or stall the server."""
from .compiler import JSON_OPTIONS, KINDS
from .errors import GrammarBusy, GrammarError
from .matcher import Grammar, Matcher

__all__ = ["JSON_OPTIONS", "KINDS", "Grammar", "GrammarBusy", "GrammarError", "Matcher"]
