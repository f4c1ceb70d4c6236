"""Messages -> prompt token ids through the model's own chat template."""
from __future__ import annotations

import functools
import threading

from .template import ChatTemplate, default_template


def template_for(metadata: dict, tokenizer, source: str | None = None) -> ChatTemplate:
    """source (a template replacing the file's), else the file's tokenizer.chat_template, else ChatML (as
    llama.cpp does). The same template object for the same source and special tokens (compiling is ~30 ms)."""
    bos = tokenizer.piece(tokenizer.bos_id).decode("utf-8", "replace") if tokenizer.bos_id is not None else ""
    eos = tokenizer.piece(tokenizer.eos_id).decode("utf-8", "replace") if tokenizer.eos_id is not None else ""
    return _template(source or metadata.get("tokenizer.chat_template") or None, bos, eos)


@functools.lru_cache(maxsize=32)
def _template(source: str | None, bos: str, eos: str) -> ChatTemplate:
    return ChatTemplate(source, bos, eos) if source else default_template(bos, eos)


def prompt_ids(template: ChatTemplate, tokenizer, messages: list[dict], cancel: threading.Event | None = None,
               add_generation_prompt: bool = True, **extra) -> list[int]:
    """Renders and tokenizes with special tokens parsed; BOS is added only if the template did not
    write it already (no doubled BOS). cancel: set from another thread to stop the render
    (ChatTemplateCancelled, e.g. when the client has gone). add_generation_prompt=False: the conversation
    alone, without the opening of the assistant's next turn."""
    text = template.render(messages, add_generation_prompt=add_generation_prompt, cancel=cancel, **extra)
    return text_ids(template, tokenizer, text)


def text_ids(template: ChatTemplate, tokenizer, text: str) -> list[int]:
    """The ids of a text the template rendered: special tokens parsed, BOS added only if not written."""
    has_bos = bool(template.bos_token) and text.startswith(template.bos_token)
    return tokenizer.encode(text, add_special=not has_bos, parse_special=True)
