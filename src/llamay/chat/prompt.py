"""Messages -> prompt token ids through the model's own chat template."""
from __future__ import annotations

from .template import ChatTemplate, default_template


def template_for(metadata: dict, tokenizer) -> ChatTemplate:
    """The file's tokenizer.chat_template, or ChatML when the file carries none (as llama.cpp does)."""
    bos = tokenizer.piece(tokenizer.bos_id).decode("utf-8", "replace") if tokenizer.bos_id is not None else ""
    eos = tokenizer.piece(tokenizer.eos_id).decode("utf-8", "replace") if tokenizer.eos_id is not None else ""
    source = metadata.get("tokenizer.chat_template")
    return ChatTemplate(source, bos, eos) if source else default_template(bos, eos)


def prompt_ids(template: ChatTemplate, tokenizer, messages: list[dict], **extra) -> list[int]:
    """Renders and tokenizes with special tokens parsed; BOS is added only if the template did not
    write it already (no doubled BOS)."""
    text = template.render(messages, add_generation_prompt=True, **extra)
    has_bos = bool(template.bos_token) and text.startswith(template.bos_token)
    return tokenizer.encode(text, add_special=not has_bos, parse_special=True)
