"""The routing key of a request: its model and the first page of its prompt. The front has no tokenizer
(it serves every model the backends have), so the page is measured in text: the first prefix_chars
characters of the prompt as the backends will render it (system, tools, then messages in order). Two
requests whose prompts share that much share their first KV page, and so land on the server holding it."""
from __future__ import annotations

import hashlib
import json
import re

# /v1/contexts/{id} and everything under it: the server holding that context answers
CONTEXT_PATH = re.compile(r"^/v1/contexts/([^/]+)")
TOKEN_PAGE = 32  # a prompt given as token ids: its first page, in tokens


def context_id(path: str) -> str | None:
    m = CONTEXT_PATH.match(path)
    return m.group(1) if m else None


def route_key(body: bytes, prefix_chars: int) -> bytes:
    """The key for a request body (JSON; anything else keys as its leading bytes)."""
    try:
        data = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON, or nested past the parser's depth
        return hashlib.blake2b(body[:prefix_chars], digest_size=16).digest()
    if not isinstance(data, dict):
        data = {"prompt": data}
    model = data.get("model") if isinstance(data.get("model"), str) else ""
    text = prompt_prefix(data)[:prefix_chars]
    return hashlib.blake2b(f"{model}\0{text}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def prompt_prefix(data: dict) -> str:
    """The prompt's text, in rendering order, as far as the key needs it (the fields every API names)."""
    parts = [_text(data.get("system"))]
    if data.get("tools"):
        parts.append(json.dumps(data["tools"], sort_keys=True, ensure_ascii=False))
    messages = data.get("messages")
    if isinstance(messages, list):
        parts += [f"{m.get('role', '')}:{_text(m.get('content'))}" for m in messages if isinstance(m, dict)]
    for field in ("prompt", "input", "content", "query"):  # completions, embeddings, tokenize, rerank
        if field in data:
            parts.append(_prompt(data[field]))
    return "\n".join(p for p in parts if p)


def _prompt(value) -> str:
    """A completion prompt: text, token ids (their first page), or a list of prompts (the first's)."""
    if isinstance(value, list) and value and all(isinstance(t, int) for t in value):
        return " ".join(map(str, value[:TOKEN_PAGE]))
    if isinstance(value, list) and value:
        return _prompt(value[0])
    return _text(value)


def _text(content) -> str:
    """A message's content: a string, or parts (OpenAI's and Anthropic's text parts; others by type)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return _text([content])
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) and isinstance(p.get("text"), str)
                       else f"[{p.get('type', '')}]" if isinstance(p, dict) else str(p) for p in content)
    return ""
