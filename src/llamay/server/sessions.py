"""Awaiting a model's engine Session verbs on the event loop, with the engine's errors as HTTP errors."""
from __future__ import annotations

import asyncio
from concurrent.futures import Future

from ..engine import OutOfPages, ShareExceeded
from .protocol.base import ProtocolError


async def settle(fut: Future, model: str | None = None):
    """The verb's result: 503 when the KV pages run out, 429 when model's named contexts would pass their
    share of its pages (contexts.CONTEXT_PAGE_SHARE)."""
    try:
        return await asyncio.wrap_future(fut)
    except OutOfPages as e:
        raise ProtocolError(503, f"out of KV cache memory: {e}", "overloaded") from None
    except ShareExceeded as e:
        raise ProtocolError(429, f"named contexts of {model} hold {e.held} KV pages and would need {e.new} more, "
                                 f"past their share of {e.limit} of {e.total} pages: delete some contexts first",
                            "rate_limit") from None
