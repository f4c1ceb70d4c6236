"""A GenRequest -> the request an upstream takes in its own API (pure): the path under its base URL and the
JSON body. Only what the request set itself is sent (serve's sampling flags are for local models); what the
upstream's API cannot carry is refused in one line (ProtocolError 400) rather than dropped."""
from __future__ import annotations

import json
from typing import Any

from ...settings import UPSTREAM
from ..prepare import grammar_spec
from ..protocol.base import bad_request
from ..protocol.request import FRESH_SEED, GenRequest

# Sampling fields each API defines, by its own name (others are not sent: api.openai.com refuses top_k)
_OPENAI_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "presence_penalty": "presence_penalty",
                    "frequency_penalty": "frequency_penalty", "seed": "seed"}
_ANTHROPIC_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}
_OLLAMA_SAMPLING = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                    "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
                    "frequency_penalty": "frequency_penalty", "repeat_last_n": "repeat_last_n", "seed": "seed"}


def request_for(api: str, model: str, req: GenRequest) -> tuple[str, dict]:
    """(path, body) of req for an upstream of `api` serving `model` (its own name, without NAME/)."""
    check_sendable(api, req)
    if api == "openai":
        return _openai(model, req)
    if api == "anthropic":
        return "/v1/messages", anthropic_body(model, req)
    return _ollama(model, req)


def check_sendable(api: str, req: GenRequest) -> None:
    """ProtocolError 400 for what an upstream of `api` cannot be asked."""
    if isinstance(req.prompt, list):
        raise bad_request("a prompt of token ids cannot be sent to an upstream (its tokens are not ours)", "prompt")
    if req.llama.grammar:
        raise bad_request("a GBNF grammar cannot be sent to an upstream: ask for a JSON schema", "grammar")
    if req.n > 1 and api != "openai":
        raise bad_request(f"n > 1 needs an OpenAI upstream; this model's upstream speaks {api}", "n")
    if req.logprobs and not (api == "openai" and req.messages is not None):
        raise bad_request(f"logprobs come only from an OpenAI upstream's chat; this request goes to {api}",
                          "logprobs")
    if req.prompt is not None and req.raw and api == "anthropic":
        raise bad_request("a raw completion cannot be sent to an Anthropic upstream (it takes messages only)",
                          "prompt")
    if req.suffix and not (req.prompt is not None and (api == "ollama" or req.raw and api == "openai")):
        raise bad_request(f"a suffix cannot be sent to this {api} upstream", "suffix")
    if (req.context or req.template) and not (api == "ollama" and req.prompt is not None):
        raise bad_request("'context' and 'template' go only to an Ollama upstream's /api/generate", "context")


def _messages(req: GenRequest) -> list[dict]:
    """The chat's messages; a prompt that is not raw as one user message (after `system`)."""
    if req.messages is not None:
        return with_call_ids(req.messages)
    system = [{"role": "system", "content": req.system}] if req.system else []
    return system + [{"role": "user", "content": req.prompt or ""}]


def with_call_ids(messages: list[dict]) -> list[dict]:
    """Copies of messages where every earlier tool call has an id and every tool result names the call it
    answers (Ollama's clients send neither: a result answers the next unanswered call, in order)."""
    out, pending = [], []
    for i, msg in enumerate(messages):
        msg = dict(msg)
        if msg.get("tool_calls"):
            msg["tool_calls"] = [{**call, "id": call.get("id") or f"call_{i}_{j}"}
                                 for j, call in enumerate(msg["tool_calls"])]
            pending = [call["id"] for call in msg["tool_calls"]]
        elif msg["role"] == "tool":
            if not msg.get("tool_call_id"):
                msg["tool_call_id"] = pending[0] if pending else f"call_{i}"
            pending = [p for p in pending if p != msg["tool_call_id"]]
        out.append(msg)
    return out


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _arguments_object(arguments: Any) -> dict:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        raise bad_request(f"an earlier tool call's arguments are not JSON: {arguments!r}", "messages") from None
    if not isinstance(value, dict):
        raise bad_request(f"an earlier tool call's arguments are not a JSON object: {arguments!r}", "messages")
    return value


def _sampling(req: GenRequest, names: dict[str, str]) -> dict:
    given = req.sampling.given()
    if given.get("seed") == FRESH_SEED:
        del given["seed"]
    return {names[k]: v for k, v in given.items() if k in names}


def _schema(req: GenRequest) -> tuple[str, object] | None:
    """The structured-output request as ("json_object", None) or ("json_schema", schema), or None."""
    return grammar_spec(req.format, None)

# ------------------------------------------------------------------------------------------------ OpenAI


def _openai(model: str, req: GenRequest) -> tuple[str, dict]:
    raw = req.prompt is not None and req.raw
    body: dict[str, Any] = {"model": model, "stream": req.stream, **_sampling(req, _OPENAI_SAMPLING)}
    if raw:
        body |= {"prompt": req.prompt} | ({"suffix": req.suffix} if req.suffix else {})
    else:
        body["messages"] = [_openai_message(m) for m in _messages(req)]
    if req.stream:
        body["stream_options"] = {"include_usage": True}
    for key, value in (("max_tokens", req.max_tokens), ("stop", req.stop or None), ("n", req.n if req.n > 1 else None),
                       ("reasoning_effort", req.chat.reasoning_effort)):
        if value is not None:
            body[key] = value
    if req.sampling.logit_bias:
        body["logit_bias"] = {str(t): b for t, b in req.sampling.logit_bias.items()}
    if req.logprobs:
        body |= {"logprobs": True} | ({"top_logprobs": req.top_logprobs} if req.top_logprobs else {})
    fmt = _schema(req)
    if fmt is not None:
        body["response_format"] = {"type": "json_object"} if fmt[0] == "json_object" else \
            {"type": "json_schema", "json_schema": {"name": "response", "schema": fmt[1]}}
    if req.tools and not raw:
        body |= {"tools": req.tools, "tool_choice": _openai_choice(req.tool_options.choice)}
        if not req.tool_options.parallel:
            body["parallel_tool_calls"] = False
    return ("/completions" if raw else "/chat/completions"), body


def _openai_choice(choice: str | dict) -> str | dict:
    return choice if isinstance(choice, str) else {"type": "function", "function": {"name": choice["name"]}}


def _openai_message(msg: dict) -> dict:
    out: dict[str, Any] = {"role": msg["role"], "content": msg.get("content", "")}
    if msg["role"] == "assistant" and msg.get("tool_calls"):
        out["content"] = out["content"] or None
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["function"]["name"],
                                           "arguments": _arguments_text(c["function"].get("arguments", {}))}}
                             for c in msg["tool_calls"]]
    if msg["role"] == "tool":
        out["tool_call_id"] = msg["tool_call_id"]
    elif msg.get("name"):
        out["name"] = msg["name"]
    return out

# --------------------------------------------------------------------------------------------- Anthropic


def anthropic_body(model: str, req: GenRequest) -> dict:
    messages = _messages(req)
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    body: dict[str, Any] = {"model": model, "max_tokens": req.max_tokens or UPSTREAM.max_tokens,
                            "messages": _anthropic_turns([m for m in messages if m["role"] != "system"]),
                            "stream": req.stream, **_sampling(req, _ANTHROPIC_SAMPLING)}
    if system:
        body["system"] = system
    if req.stop:
        body["stop_sequences"] = req.stop
    if req.chat.thinking is not None:
        body["thinking"] = dict(req.chat.thinking)
    fmt = _schema(req)
    if fmt is not None:
        schema = fmt[1] if fmt[0] == "json_schema" else {"type": "object"}
        body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    if req.tools:
        choice = req.tool_options.choice
        body["tools"] = [_anthropic_tool(t["function"]) for t in req.tools]
        body["tool_choice"] = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}[choice] \
            if isinstance(choice, str) else {"type": "tool", "name": choice["name"]}
        if not req.tool_options.parallel and choice != "none":
            body["tool_choice"]["disable_parallel_tool_use"] = True
    return body


def _anthropic_tool(fn: dict) -> dict:
    tool = {"name": fn["name"], "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}
    return tool | ({"description": fn["description"]} if fn.get("description") else {})


def _anthropic_turns(messages: list[dict]) -> list[dict]:
    """Chat-template messages -> Anthropic turns: tool results become tool_result blocks of a user turn,
    calls tool_use blocks of the assistant's; consecutive turns of one role are one turn."""
    turns: list[dict] = []
    for msg in messages:
        role = "assistant" if msg["role"] == "assistant" else "user"
        blocks = _anthropic_blocks(msg)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _anthropic_blocks(msg: dict) -> list[dict]:
    text = msg.get("content") or ""
    if msg["role"] == "tool":
        return [{"type": "tool_result", "tool_use_id": msg["tool_call_id"], "content": text}]
    blocks = [{"type": "text", "text": text}] if text or not msg.get("tool_calls") else []
    for call in msg.get("tool_calls") or ():
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": _arguments_object(call["function"].get("arguments", {}))})
    return blocks

# ------------------------------------------------------------------------------------------------ Ollama


def _ollama(model: str, req: GenRequest) -> tuple[str, dict]:
    options = _sampling(req, _OLLAMA_SAMPLING)
    if req.max_tokens is not None:
        options["num_predict"] = req.max_tokens
    if req.stop:
        options["stop"] = req.stop
    body: dict[str, Any] = {"model": model, "stream": req.stream}
    if options:
        body["options"] = options
    if req.keep_alive is not None:
        body["keep_alive"] = req.keep_alive
    if req.ollama is not None and req.ollama.think is not None:
        body["think"] = req.ollama.think
    fmt = _schema(req)
    if fmt is not None:
        body["format"] = "json" if fmt[0] == "json_object" else fmt[1]
    if req.prompt is not None:
        fields = {"prompt": req.prompt, "raw": req.raw, "suffix": req.suffix, "system": req.system,
                  "template": req.template, "context": req.context}
        return "/api/generate", body | {k: v for k, v in fields.items() if v}
    body["messages"] = [_ollama_message(m) for m in with_call_ids(req.messages)]
    tools = req.tools if req.tool_options.choice != "none" else None
    if tools and isinstance(req.tool_options.choice, dict):  # Ollama has no tool_choice: only the named tool
        tools = [t for t in tools if t["function"]["name"] == req.tool_options.choice["name"]]
    if tools:
        body["tools"] = tools
    return "/api/chat", body


def _ollama_message(msg: dict) -> dict:
    out: dict[str, Any] = {"role": msg["role"], "content": msg.get("content", "")}
    if msg.get("thinking"):
        out["thinking"] = msg["thinking"]
    if msg.get("tool_calls"):
        out["tool_calls"] = [{"function": {"name": c["function"]["name"],
                                           "arguments": _arguments_object(c["function"].get("arguments", {}))}}
                             for c in msg["tool_calls"]]
    if msg["role"] == "tool":
        out["tool_call_id"] = msg["tool_call_id"]
        if msg.get("name"):
            out["tool_name"] = msg["name"]
    return out
