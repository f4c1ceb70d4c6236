"""The tool-call formats of the major model families, as their chat templates render an assistant's calls.

A call region starts at `trigger` (text the model writes, or a special token's text) and holds one call, or
several separated by `sep` inside `open` ... `close`. A call is `head` (the function name in it) + the
arguments (a JSON object; Gemma 4's own object syntax; XML parameter blocks; Python keyword arguments) +
`tail`. Parallel calls as several regions are separated by `region_sep`. These describe what llamay's grammars generate; the parser also reads what the
templates render (other whitespace, extra keys such as ids)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

_NAME = r'"((?:[^"\\]|\\.)*)"'


@dataclass(frozen=True)
class CallFormat:
    name: str
    trigger: str  # starts a region; "" = the whole output is one region (generic JSON)
    open: str  # after the trigger, before the first call
    head: str  # a call's text before its arguments; {name} stands for the function name, {index} for a number
    tail: str  # after the arguments
    close: str  # ends the region ("" = a region ends with its call, or at the output's end)
    sep: str = ""  # between calls inside one region ("" = one call per region)
    region_sep: str = ""  # between regions
    head_re: str = ""  # reads a head as rendered/generated (group 1: the name), anchored at the call start
    tail_re: str = r"\s*\}"  # reads a tail
    sep_re: str = r"\s*,\s*"
    close_re: str = ""
    args: str = "json"  # "json", "gemma" (Gemma 4's <|"|>-quoted object syntax), "xml" (<parameter=KEY>
    # blocks: xmlcall.py) or "python" (keyword arguments: pythonic.py)
    quoted_name: bool = True  # the name in head_re's group 1 is a JSON string body
    keys: tuple[str, str] | None = ("name", "arguments")  # a JSON call object's name and arguments keys
    # (function name, parameter schema) of the offered tools, where the arguments' syntax needs them to be
    # typed ("xml"); bound per request (toolcall/plan.py)
    schemas: tuple = field(default=(), compare=False)

    def head_text(self, name: str) -> str:
        return self.head.replace("{name}", name)

    def with_tools(self, tools: list[dict]) -> CallFormat:
        """This format knowing the tools' parameter schemas (tools in the chat-template shape)."""
        return replace(self, schemas=tuple((t["function"]["name"], t["function"].get("parameters") or {})
                                           for t in tools))


def _json_head(name_key: str, args_key: str, extra: str = "") -> str:
    return r'\s*\{\s*' + extra + f'"{name_key}"' + r'\s*:\s*' + _NAME + r'\s*,\s*' + f'"{args_key}"' + r'\s*:\s*'


HERMES = CallFormat(  # Hermes 2/3, Qwen 2.5/3, QwQ, SmolLM3 (ChatML family)
    "hermes", "<tool_call>", "\n", '{"name": "{name}", "arguments": ', "}", "\n</tool_call>",
    region_sep="\n", head_re=_json_head("name", "arguments"), close_re=r"\s*</tool_call>")
LLAMA3 = CallFormat(  # Llama 3.1 / 3.2 / 3.3 JSON tool calling
    "llama3", '{"name": "', "", '{"name": "{name}", "parameters": ', "}", "", region_sep="\n",
    keys=("name", "parameters"),
    head_re=_json_head("name", "parameters"))
MISTRAL = CallFormat(  # Mistral Nemo / Small 3.0 / 3.1: [TOOL_CALLS][{...}, {...}]
    "mistral", "[TOOL_CALLS]", "[", '{"name": "{name}", "arguments": ', "}", "]", sep=", ",
    head_re=r"\s*" + _json_head("name", "arguments"), tail_re=r'(?:\s*,\s*"id"\s*:\s*"[^"]*")?\s*\}',
    close_re=r"\s*\]")
MISTRAL_ARGS = CallFormat(  # Mistral Small 3.2, Magistral, Devstral: [TOOL_CALLS]name[ARGS]{...}
    "mistral_args", "[TOOL_CALLS]", "", "{name}[ARGS]", "", "", keys=None,
    head_re=r"([A-Za-z0-9_.\-]+)(?:\[CALL_ID\][A-Za-z0-9]*)?\[ARGS\]", tail_re="", quoted_name=False)
COMMAND_R7B = CallFormat(  # Command R7B: <|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., ...}]
    "command_r7b", "<|START_ACTION|>", "[", '{"tool_name": "{name}", "parameters": ', "}", "]<|END_ACTION|>",
    keys=("tool_name", "parameters"),
    sep=", ", head_re=_json_head("tool_name", "parameters", r'(?:"tool_call_id"\s*:\s*"[^"]*"\s*,\s*)?'),
    close_re=r"\s*\]\s*<\|END_ACTION\|>")
COMMAND_R = CallFormat(  # Command R / R+: Action: ```json [{"tool_name": ..., "parameters": {...}}] ```
    "command_r", "Action:", " ```json\n[", '{"tool_name": "{name}", "parameters": ', "}", "]\n```",
    keys=("tool_name", "parameters"),
    sep=", ", head_re=_json_head("tool_name", "parameters"), close_re=r"\s*\]\s*```")
GEMMA4 = CallFormat(  # Gemma 4: <|tool_call>call:name{key:<|"|>text<|"|>,n:1}<tool_call|>
    "gemma4", "<|tool_call>", "", "call:{name}", "", "<tool_call|>", keys=None,
    head_re=r"call:([A-Za-z0-9_.\-]+)(?=\{)", tail_re="", close_re=r"<tool_call\|>", args="gemma", quoted_name=False)
QWEN_XML = CallFormat(  # Qwen3-Coder, Qwen3.5 / 3.6, Nemotron 3 Nano, Step 3.5 Flash:
    # <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
    "qwen_xml", "<tool_call>", "\n", "<function={name}>\n", "</function>", "\n</tool_call>", region_sep="\n",
    keys=None, head_re=r"\s*<function=([^>\n]+)>", tail_re="</function>", close_re=r"\s*</tool_call>",
    args="xml", quoted_name=False)
LFM2 = CallFormat(  # LFM2 / LFM2.5: <|tool_call_start|>[name(key="v", n=1), other()]<|tool_call_end|>
    "lfm2", "<|tool_call_start|>", "[", "{name}(", ")", "]<|tool_call_end|>", sep=", ", keys=None,
    head_re=r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)\(", tail_re=r"\)", close_re=r"\s*\]\s*<\|tool_call_end\|>",
    args="python", quoted_name=False)
NEMOTRON = CallFormat(  # Nemotron Nano 2: <TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL>
    "nemotron", "<TOOLCALL>", "[", '{"name": "{name}", "arguments": ', "}", "]</TOOLCALL>", sep=", ",
    head_re=_json_head("name", "arguments"), close_re=r"\s*\]\s*</TOOLCALL>")
KIMI_K2 = CallFormat(  # Kimi K2, Kimi-Linear: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
    # <|tool_call_argument_begin|>{...}<|tool_call_end|> (more calls each from <|tool_call_begin|>) <|tool_calls_section_end|>;
    # the templates number the calls (:0, :1, ...)
    "kimi_k2", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.{name}:{index}<|tool_call_argument_begin|>",
    "<|tool_call_end|>", "<|tool_calls_section_end|>", sep="<|tool_call_begin|>", keys=None,
    head_re=r"\s*(?:functions\.)?([^\s:<]+)(?::\d+)?\s*<\|tool_call_argument_begin\|>", tail_re=r"\s*<\|tool_call_end\|>",
    sep_re=r"\s*<\|tool_call_begin\|>", close_re=r"\s*<\|tool_calls_section_end\|>", quoted_name=False)
GENERIC = CallFormat(  # llama.cpp's generic form for templates without tool support
    "generic", "", '{"tool_calls": [', '{"name": "{name}", "arguments": ', "}", "]}", sep=", ",
    head_re=_json_head("name", "arguments"), close_re=r"\s*\]\s*\}")

FORMATS = {f.name: f for f in (HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, COMMAND_R7B, COMMAND_R, GEMMA4, QWEN_XML, LFM2,
                                NEMOTRON, KIMI_K2, GENERIC)}

# Markers in a template's source (all of an entry's), most specific first.
_DETECT = (
    (("<|tool_call>call:",), GEMMA4),
    (("[ARGS]",), MISTRAL_ARGS),
    (("[TOOL_CALLS]",), MISTRAL),
    (("<|START_ACTION|>",), COMMAND_R7B),
    (("Action:",), COMMAND_R),
    (("<tool_call>", "<function=", "<parameter="), QWEN_XML),
    (("<tool_call>",), HERMES),
    (("<TOOLCALL>",), NEMOTRON),
    (("<|tool_calls_section_begin|>",), KIMI_K2),
    (("List of tools: ",), LFM2),  # LFM2 lists tools so; only LFM2.5's newer templates render calls
    (("<|python_tag|>",), LLAMA3),
    (('"parameters": ',), LLAMA3),
)


def detect(source: str, supports_tools: bool = True) -> CallFormat:
    """The format a template's model writes calls in; GENERIC when it renders no tools or none is known."""
    if not supports_tools or not source:
        return GENERIC
    for markers, fmt in _DETECT:
        if all(marker in source for marker in markers):
            return fmt
    return GENERIC
