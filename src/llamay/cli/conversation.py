"""The chat's conversation: a system message and messages, rendered whole through the model's template at
every turn (the radix tree holds what earlier turns computed, so a turn prefills only what is new), and
saved as a context snapshot of its rendering beside its messages in $LLAMAY_HOME/chats."""
from __future__ import annotations

import json
from pathlib import Path

from .. import env
from ..chat import ChatTemplateError, prompt_ids, template_for
from ..files import write_atomic
from .common import CLIError


def chat_template(llm):
    """The model's chat template; a broken one is a CLIError."""
    try:
        return template_for(llm.metadata, llm.tokenizer)
    except ChatTemplateError as e:
        raise CLIError(f"the model's chat template is broken: {e}") from None


def chats_dir() -> Path:
    return env.home() / "chats"


class Conversation:
    def __init__(self, llm, system: str | None = None):
        self.llm, self.template = llm, chat_template(llm)
        self.system = system or None
        self.messages: list[dict] = []

    def prompt(self, generation: bool = True) -> list[int]:
        """The whole conversation's ids, opening the assistant's turn unless generation=False.
        ChatTemplateError when the template refuses it."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        return prompt_ids(self.template, self.llm.tokenizer, system + self.messages, add_generation_prompt=generation)

    def save(self, name: str) -> int:
        """NAME.llamayctx (the K/V of prompt(generation=False)) and NAME.json (system and messages) -> tokens
        saved. The K/V comes from the radix tree where earlier turns left it."""
        ids = self.prompt(generation=False)
        if not ids:
            raise ValueError("nothing to save: the conversation is empty")
        folder = chats_dir()
        folder.mkdir(parents=True, exist_ok=True)
        ctx = self.llm.create_context(ids)
        try:
            ctx.save(str(folder / f"{name}.llamayctx"))
        finally:
            ctx.delete()
        text = json.dumps({"system": self.system, "messages": self.messages}, ensure_ascii=False, indent=1)
        write_atomic(folder / f"{name}.json", lambda f: f.write(text.encode()))
        return len(ids)

    def load(self, name: str) -> int:
        """Replaces the conversation with a saved one, its K/V restored into the radix tree (so the next turn
        prefills only what follows it) -> tokens restored. ValueError (SnapshotError among them): one line."""
        folder = chats_dir()
        try:
            saved = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"no saved chat named '{name}' (/save {name} makes one)") from None
        except ValueError:  # not JSON, or not UTF-8
            saved = None
        system, messages = _saved_messages(name, saved)
        ctx = self.llm.restore_context(folder / f"{name}.llamayctx")
        n_tokens = len(ctx.tokens)
        ctx.delete()  # its tokens and pages stay in the radix tree
        self.system, self.messages = system, messages
        return n_tokens


def _saved_messages(name: str, saved) -> tuple[str | None, list[dict]]:
    """NAME.json's system and messages, checked: ValueError if it is not what save() writes."""
    messages = saved.get("messages") if isinstance(saved, dict) else None
    system = saved.get("system") if isinstance(saved, dict) else None
    ok = isinstance(messages, list) and (system is None or isinstance(system, str)) and all(
        isinstance(m, dict) and set(m) == {"role", "content"} and all(isinstance(v, str) for v in m.values())
        for m in messages)
    if not ok:
        raise ValueError(f"{name}.json in {chats_dir()} is not a saved chat")
    return system, messages
