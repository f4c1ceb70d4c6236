"""Structured output: JSON Schema / GBNF / regex / Lark compiled once into per-sequence token masks
(llguidance, DESIGN.md §8). Pure bookkeeping: no tensor code."""
from .matcher import JSON_OPTIONS, KINDS, Grammar, GrammarError, Matcher

__all__ = ["JSON_OPTIONS", "KINDS", "Grammar", "GrammarError", "Matcher"]
