"""A draft model for speculative decoding (spec "draft"): a smaller model of the target's vocabulary proposes
each sequence's next tokens greedily and the target checks them in one pass (scheduler.py), so the output is
the target's, token for token. The draft model has its own context store (pages, radix tree): each sequence keeps a
context there, cut back to what the target accepted at its next step. The drafts of every sequence of a
step are decoded together, one batched pass per draft position.

A draft stops early where the draft model is unsure (its top token's probability under SPEC.draft_p_min);
its longest length is chosen as draft.py chooses, each draft token costing `cost` target steps."""
from __future__ import annotations

import os

import numpy as np

from ..gguf import GGUFReader
from ..kv import OutOfPages
from ..models import Decoder, UnsupportedModel, arch_spec
from ..settings import LOAD, SPEC
from .draft import DRAFT, Outcomes, best_length, step_costs
from .embed import file_tokenizer
from .context_store import ContextStore

MAX_VOCAB_DIFFERENCE = 128  # llama.cpp's limit on a draft vocabulary's extra tokens


class DraftMismatch(ValueError):
    """The draft model cannot draft for this target: another vocabulary."""


def check_vocab(target, draft, name: str):
    """DraftMismatch unless the two tokenizers share their tokens (ids and texts; either may have up to
    MAX_VOCAB_DIFFERENCE more at the end, never drafted)."""
    a, b = target.vocab, draft.vocab
    if a.model != b.model:
        raise DraftMismatch(f"draft model {name} has a {b.model} tokenizer, the model a {a.model} one")
    if abs(len(a.tokens) - len(b.tokens)) > MAX_VOCAB_DIFFERENCE:
        raise DraftMismatch(f"draft model {name} has {len(b.tokens)} tokens, the model {len(a.tokens)}: "
                            "not the same vocabulary")
    for i, (x, y) in enumerate(zip(a.tokens, b.tokens)):
        if x != y:
            raise DraftMismatch(f"draft model {name} is not of the model's vocabulary: token {i} is {y!r} "
                                f"there, {x!r} in the model")


class DraftModel:
    def __init__(self, path: str, target_tokenizer, threads: int, n_ctx: int, n_pages: int, cost: float,
                 kv: str = LOAD.kv, page_size: int = LOAD.page_size):
        """cost: one draft token relative to one of the target's decode steps. n_ctx: the target's."""
        reader = GGUFReader(path)
        spec = arch_spec(reader.metadata, reader.tensors)
        if spec.state_layers:
            raise UnsupportedModel(f"draft model {os.path.basename(path)}: a hybrid model ({spec.arch}) cannot "
                                   "draft yet (its recurrent state would have to follow every cut)")
        check_vocab(target_tokenizer, file_tokenizer(reader), os.path.basename(path))
        self.path, self.cost, self.n_ctx = path, cost, min(n_ctx, spec.n_ctx_train)
        self.n_vocab = min(spec.n_vocab, target_tokenizer.n_vocab)
        self.decoder = Decoder(reader, spec, threads, self.n_ctx)
        self._shape = (n_pages, page_size, kv)
        self.store = ContextStore(self.decoder, *self._shape)

    def reset(self):
        """Forget every draft context and cached prefix (LLM.reset); the page pool is kept."""
        self.store = ContextStore(self.decoder, *self._shape, pool=self.store.pool)

    def drafter(self) -> ModelDrafter:
        return ModelDrafter(self)

    def propose_many(self, asks: list[tuple[ModelDrafter, list[int], int, int]]) -> list[list[int]]:
        """asks: (drafter, history, next_tok, limit) of each sequence -> its draft (propose's contract)."""
        out: list[list[int]] = [[] for _ in asks]
        live = []  # (index, drafter, length wanted, the token to feed next)
        for i, (d, history, next_tok, limit) in enumerate(asks):
            k = d.length(min(limit, self.n_ctx - 2 - len(history)))
            if k and (tok := d.sync(history, next_tok)) is not None:
                live.append((i, d, k, tok))
            elif not k:
                d.outcomes.learn(DRAFT, 0, 0)
        while live:
            try:
                logits = self.store.compute([(d.ctx, [tok]) for _, d, _, tok in live], None)
            except OutOfPages:
                break  # the drafts so far stand; the draft contexts are unchanged
            more = []
            for (i, d, k, tok), row in zip(live, logits):
                d.tokens.append(tok)
                row = row[:self.n_vocab]
                best = int(np.argmax(row))
                out[i].append(best)
                if len(out[i]) < k and 1.0 / np.exp(row - row[best]).sum() >= SPEC.draft_p_min:
                    more.append((i, d, k, best))
            live = more
        return out


class ModelDrafter:
    """One sequence's drafts from the draft model: its draft context holds the sequence's tokens (and the
    last draft's) whose K/V the draft model has computed."""

    def __init__(self, model: DraftModel):
        self.group = model
        self.ctx: int | None = None
        self.tokens: list[int] = []  # the draft context's computed tokens
        self._synced = 0  # how many of them are known to be the sequence's
        self._cost = step_costs()
        self.outcomes = Outcomes()

    def length(self, limit: int) -> int:
        return best_length(self.outcomes.p(DRAFT), self._cost, limit, self.group.cost) if limit > 0 else 0

    def sync(self, history: list[int], next_tok: int) -> int | None:
        """Make the draft context hold history (computing what it lacks) -> next_tok, to feed; None where
        the draft model has no room (then the sequence drafts nothing this step)."""
        store = self.group.store
        seq_len = len(history) + 1
        try:
            if self.ctx is None:
                self.ctx, n = store.open(history + [next_tok])
                self.tokens = history[:n]
            else:
                keep = self._synced
                while keep < min(len(self.tokens), len(history)) and self.tokens[keep] == history[keep]:
                    keep += 1
                if keep < len(self.tokens):
                    store.truncate(self.ctx, keep)
                    del self.tokens[keep:]
            todo = history[len(self.tokens):]
            if todo:
                store.extend(self.ctx, todo)
                self.tokens += todo
        except OutOfPages:
            self.close()
            return None
        self._synced = seq_len - 1
        return next_tok

    def verified(self, n_sent: int, n_accepted: int):
        self.outcomes.learn(DRAFT, n_accepted, n_accepted + (n_accepted < n_sent))

    def close(self):
        if self.ctx is not None:
            self.group.store.free(self.ctx)
            self.ctx, self.tokens, self._synced = None, [], 0
