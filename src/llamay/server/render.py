"""A GenRequest to a prompt's tokens: raw text and ids as they are, else the chat template (server's or
model's) rendered with the request's messages and the tool plan; the checks that it fits the context."""
from __future__ import annotations

import json
import threading
from datetime import datetime

from ..chat import ChatTemplate, ChatTemplateError, template_for
from ..chat.gotemplate import GoTemplateError, render_go
from ..chat.prompt import text_ids
from ..chat.reasoning import opened
from ..engine import ContextOverflow
from ..toolcall.plan import ToolPlan
from ..toolcall.plan import plan as plan_tools
from .registry import Loaded
from .protocol.base import ProtocolError, bad_request
from .protocol.llamacpp_out import ModelView
from .protocol.llamacpp_params import mixed_ids
from .protocol.request import GenRequest


def render(loaded: Loaded, req: GenRequest, cancel: threading.Event | None = None) -> list[int]:
    return render_plan(loaded, req, cancel)[0]


def render_plan(loaded: Loaded, req: GenRequest,
                cancel: threading.Event | None = None) -> tuple[list[int], ToolPlan | None]:
    """The prompt's token ids (raw text/ids as they are, else through the model's chat template) and the
    tool-call plan of a chat with tools. cancel, once set, stops a template render (the client left)."""
    llm = loaded.llm
    _check_text_fits(llm, req)
    if req.raw or (req.messages is None and isinstance(req.prompt, list)):
        ids = mixed_ids(req.prompt or "", lambda text, first: llm.tokenize(text, first, parse_special=True))
        return list(req.context or []) + ids, None
    if req.template is not None and req.messages is None:  # Ollama /api/generate's own template
        try:
            text = render_go(req.template, req.system or "", req.prompt or "")
        except GoTemplateError as e:
            raise bad_request(str(e), "template") from None
        return list(req.context or []) + llm.tokenize(text, parse_special=True), None
    messages = list(req.messages if req.messages is not None else [{"role": "user", "content": req.prompt or ""}])
    if req.system is not None:
        messages = [{"role": "system", "content": req.system}] + [m for m in messages if m["role"] != "system"]
    template, tools = chat_plan(loaded, req, messages)
    text = render_text(template, tools, req, cancel=cancel)
    if tools is not None and tools.lark and opened(text):  # forced calls come after the reasoning it opened
        template, tools = chat_plan(loaded, req, messages, opened=True)
    ids = text_ids(template, llm.tokenizer, text)
    if req.context:
        bos = llm.tokenizer.bos_id
        ids = list(req.context) + (ids[1:] if ids and ids[0] == bos else ids)
    return ids, tools


def model_view(loaded: Loaded, settings) -> ModelView:
    """What llama-server's native bodies show of the model (its template: the server's --chat-template's)."""
    llm, tok = loaded.llm, loaded.llm.tokenizer
    template = template_for(llm.metadata, tok, settings.chat_template)
    return ModelView(loaded.info.name, loaded.info.path, llm.n_ctx, template.source, template.bos_token,
                     template.eos_token, llm.detokenize, tuple(tok.eog_ids))


def chat_plan(loaded: Loaded, req: GenRequest, messages: list[dict],
              opened: bool = False) -> tuple[ChatTemplate, ToolPlan]:
    """The chat template (the server's --chat-template, else the model's) and the tool plan for messages
    (opened: their render ends inside <think>)."""
    llm = loaded.llm
    try:
        template = template_for(llm.metadata, llm.tokenizer, req.chat.template)
        tools = req.tool_options
        return template, plan_tools(template.source, messages, req.tools, llm.tokenizer, tools.choice, tools.parallel,
                                    opened)
    except ChatTemplateError as e:
        raise bad_request(f"the model's chat template cannot be used: {e}", "messages") from None
    except ValueError as e:
        raise bad_request(str(e), "tool_choice") from None


RENDER_ARGS = frozenset({"messages", "add_generation_prompt", "tools", "cancel"})  # ChatTemplate.render's own


def render_text(template: ChatTemplate, tools: ToolPlan, req: GenRequest, add_generation_prompt: bool = True,
                cancel: threading.Event | None = None) -> str:
    """The template's text for the plan's messages and tools (with the request's chat_template_kwargs). A
    prefill (req.chat.continue_final): the messages before the last (assistant) one with the generation
    prompt, then that message's text, unclosed, as llama.cpp renders it (common/chat.cpp)."""
    kwargs = req.chat.template_kwargs
    taken = sorted(set(kwargs) & RENDER_ARGS)
    if taken:
        raise bad_request(f"'chat_template_kwargs' may not set {', '.join(taken)}", "chat_template_kwargs")
    messages, prefill = tools.messages, ""
    if req.chat.continue_final and messages and messages[-1]["role"] == "assistant" and \
            isinstance(messages[-1].get("content") or "", str):
        messages, prefill, add_generation_prompt = messages[:-1], messages[-1].get("content") or "", True
    try:
        return template.render(messages, add_generation_prompt, tools.tools, cancel,
                               **{**dated_context(template.source, tools.tools), **kwargs}) + prefill
    except ChatTemplateError as e:
        raise bad_request(f"the model's chat template refused the messages: {e}", "messages") from None


def dated_context(source: str, tools: list[dict] | None, now: datetime | None = None) -> dict:
    """What llama.cpp gives a template beside the messages (ref: llama.cpp common/chat.cpp): today's date as
    `date_string` (Llama 3.x's templates; without it they print 26 Jul 2024), and to firefunction v2's
    (`functools[` calls) `datetime` and the tools as JSON `functions`."""
    now = now or datetime.now()  # local time, as llama.cpp's
    context = {"date_string": now.strftime("%d %b %Y")}
    if "functools[" in source:
        context |= {"datetime": now.strftime("%b %d %Y %H:%M:%S GMT"),
                    "functions": json.dumps(tools, indent=2) if tools else ""}
    return context


def check_prompt(llm, ids: list[int], extra: int, param: str) -> None:
    """The engine's checks as the API's errors: the prompt (after `extra` tokens already in a context) leaves
    room for a reply (400 context_length) and every id is in the vocabulary (400)."""
    try:
        llm.check_fits(len(ids) + extra, room=1)
        llm.check_vocab(ids)
    except ContextOverflow as e:
        raise context_error(str(e), len(ids) + extra, llm.n_ctx, param) from None
    except ValueError as e:
        raise bad_request(str(e), "prompt") from None


TEXT_SLACK = 2  # whitespace a tokenizer may fold away: refuse only text twice too long to ever fit


def context_error(message: str, n_prompt: int, n_ctx: int, param: str) -> ProtocolError:
    return ProtocolError(400, message, "context_length", param, {"n_prompt_tokens": n_prompt, "n_ctx": n_ctx})


def _check_text_fits(llm, req: GenRequest) -> None:
    """A 400 before tokenizing text that cannot fit the context whatever its tokens: a token stands for at
    most max_piece_bytes of text (so its n_prompt_tokens is that lower bound). Tokenizing megabytes costs
    seconds and gigabytes another client waits for."""
    pieces = req.prompt if isinstance(req.prompt, list) else [req.prompt]
    texts = [p for p in pieces if isinstance(p, str)] + [req.system or ""]
    texts += [m.get("content") for m in req.messages or [] if isinstance(m.get("content"), str)]
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    if n_bytes <= TEXT_SLACK * llm.n_ctx:
        return
    max_piece = llm.tokenizer.max_piece_bytes
    if n_bytes > TEXT_SLACK * llm.n_ctx * max_piece:
        raise context_error(f"the prompt is {n_bytes} bytes of text, more than the context of {llm.n_ctx} tokens "
                            "can hold (nothing was truncated)", -(-n_bytes // max_piece), llm.n_ctx, "messages")
