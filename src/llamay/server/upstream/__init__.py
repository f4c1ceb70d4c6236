"""Upstream providers (serve --upstream): models answered by an OpenAI-, Anthropic- or Ollama-compatible server
instead of a local GGUF, behind every client API. A request for NAME/model (or for a name only an upstream
lists) is sent to upstream NAME in its own API (encode.py), and its answer comes back as the engine's
Delta / Finish events (decode.py), which each client API's writer turns into its response unchanged."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from ...settings import UPSTREAM
from ..protocol.base import ModelInfo
from .client import Upstream, UpstreamGeneration
from .spec import APIS, UpstreamSpec, parse_spec

__all__ = ["APIS", "Upstream", "UpstreamGeneration", "UpstreamSpec", "Upstreams", "parse_spec"]
log = logging.getLogger("llamay.server")


class Upstreams:
    """Every --upstream of a server, by name (none by default)."""

    def __init__(self, upstreams: Iterable[Upstream] = ()):
        self.by_name = {u.spec.name: u for u in upstreams}
        self._listing: asyncio.Lock | None = None
        self._listed = False  # every upstream's list was asked for once

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def find(self, model: str | None, is_local: Callable[[str], bool]) -> tuple[Upstream, str] | None:
        """(upstream, its name for the model) answering a request's `model`, or None: NAME/model names
        upstream NAME; a name no local model has (is_local) goes to the first upstream listing it."""
        if not model or not self.by_name:
            return None
        prefix, sep, rest = model.partition("/")
        if sep and rest and prefix in self.by_name:
            return self.by_name[prefix], rest
        if is_local(model):
            return None
        return next(((u, model) for u in self.by_name.values() if model in u.models), None)

    async def refresh(self) -> None:
        """Reads every upstream's model list (at once)."""
        await asyncio.gather(*(u.list_models() for u in self.by_name.values()))
        self._listed = True

    async def keep_listed(self) -> None:
        """Refreshes the lists every UPSTREAM.list_every seconds (the app's lifespan runs it)."""
        while True:
            await self.refresh()
            await asyncio.sleep(UPSTREAM.list_every)

    async def infos(self) -> list[ModelInfo]:
        """Every model the upstreams list, named NAME/model (their lists read first if never read)."""
        if not self._listed and self.by_name:
            self._listing = self._listing or asyncio.Lock()
            async with self._listing:
                if not self._listed:
                    await self.refresh()
        return [info(u, m) for u in self.by_name.values() for m in u.models]

    async def aclose(self) -> None:
        for u in self.by_name.values():
            await u.aclose()


def info(upstream: Upstream, model: str) -> ModelInfo:
    """A listing entry for an upstream's model: no file, size or architecture known here."""
    return ModelInfo(name=f"{upstream.spec.name}/{model}", path=upstream.spec.url, size=0, digest="",
                     modified_at=upstream.listed_at or time.time(), architecture="", parameter_size="",
                     quantization_level="", context_length=0, metadata={"upstream": upstream.spec.name})
