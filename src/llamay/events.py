"""What generation produces, for every layer above it: Delta (new output of one choice, with its
logprobs and tool-call parts), Finish (a choice ended, with its Usage) and, when a request asked, Progress
(how far its prompt is computed). Plain data; imports nothing of llamay, so the tool-call parser, the
engine and the server all read the same types."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TopLogprob:
    token: str  # the token's text (may be part of a UTF-8 character: then bytes tells it exactly)
    logprob: float
    bytes: list[int]
    id: int | None = None  # the token id (llama-server's completion_probabilities name it)


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top: list[TopLogprob] = field(default_factory=list)
    id: int | None = None


@dataclass
class ToolCallDelta:
    """Part of one tool call of a choice. A call's first delta carries its id and name; later ones only
    argument text. A call's `arguments` fragments joined are its arguments as JSON object text (cut short
    only when the choice ends at max_tokens: Finish.reason 'length')."""
    index: int  # the call's position among this choice's calls: 0, 1, ...
    id: str | None = None  # "call_" + 24 alphanumerics, on the first delta; an API may reshape the prefix
    name: str | None = None  # on the first delta
    arguments: str = ""


@dataclass
class Delta:
    """New output of one choice. content and reasoning are text safe to show now (never half a UTF-8
    character, never part of a stop string); either may be empty. logprobs: one entry per sampled token
    this delta covers, when the request asked for logprobs. tool_calls: parts of calls, in order. tokens:
    the ids of the tokens sampled since the choice's previous delta (llama-server's `tokens`)."""
    index: int
    content: str = ""
    reasoning: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    usage: Usage | None = None  # the choice's usage so far, when the request asked (llama-server's timings_per_token)


@dataclass
class Usage:
    prompt_tokens: int = 0  # tokens of the prompt
    cached_tokens: int = 0  # of those, found already computed (prefix cache): not evaluated
    completion_tokens: int = 0
    load_ns: int = 0  # model load time charged to this request
    prompt_eval_ns: int = 0
    eval_ns: int = 0
    total_ns: int = 0
    drafted_tokens: int = 0  # speculative decoding: draft tokens verified
    accepted_tokens: int = 0  # of them, emitted
    disk_tokens: int = 0  # of cached_tokens, read from the prefix cache's disk tier (the rest: memory)
    shared_tokens: int = 0  # of cached_tokens, read from its shared tier (Redis / Valkey)

    @property
    def prompt_eval_count(self) -> int:
        """What was actually evaluated (Ollama's prompt_eval_count): 0 for a prompt asked before whose end's
        logits are kept (a regenerate), else at least its last token."""
        return self.prompt_tokens - self.cached_tokens


@dataclass
class Finish:
    """One choice ended. reason: 'stop' (end-of-generation token or stop string), 'length' (max_tokens
    or the context's end), 'tool_calls' (the output ended with one or more tool calls)."""
    index: int
    reason: str
    usage: Usage  # the usage of this choice's sequence (prompt counted in every choice)
    context: list[int] | None = None  # every token of the sequence: prompt and generated (Ollama's `context`)
    stop_sequence: str | None = None  # the stop string that ended it (reason 'stop'), if one did


@dataclass
class Progress:
    """How far the prompt is computed (llama-server's prompt_progress, for a stream that asked): once when its
    generation starts (processed == cached), then after each forward pass that computed part of it, the last
    with processed == total; all before the first Delta."""
    total: int  # the prompt's tokens
    cached: int  # of them, found computed
    processed: int  # of them, computed now (the cached ones included)
    prompt_ns: int  # since the generation started, at the end of the last pass (0 before the first)

    def usage(self) -> Usage:
        """The usage so far: the part computed counts as the prompt (so its evaluated tokens are processed -
        cached), nothing generated yet."""
        return Usage(self.processed, self.cached, prompt_eval_ns=self.prompt_ns)
