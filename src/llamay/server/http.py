"""What every route shares over HTTP: reading bodies, answering errors in the route's own API shape,
streaming an Output's frames or collecting it whole, and noticing clients that go away."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import JSONResponse

from .jsonbody import parse_body
from .protocol.base import Output, ProtocolError

DISCONNECT_POLL_S = 0.25
CLIENT_GONE = 499  # nginx's "client closed request": what a log shows for an answer nobody was there to read
log = logging.getLogger("llamay.server")


async def read_bounded(request: Request, limit: int) -> bytes | None:
    """The body, or None once it passes limit bytes (stops reading there)."""
    parts, seen = [], 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


async def read_json(request: Request, array: bool = False) -> dict | list:
    return parse_body(await request.body(), array)


async def off_loop(request: Request, fn: Callable, *args):
    """fn(*args, cancel) in a worker thread; cancel (a threading.Event) is set when the client disconnects
    meanwhile, or this coroutine is cancelled, so a long render stops instead of running for nobody."""
    cancel = threading.Event()
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args, cancel))
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                cancel.set()
        return task.result()
    finally:
        cancel.set()


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def api(proto):
    """Route decorator: a ProtocolError (or an unexpected failure) becomes proto.error_body at its status."""
    def wrap(route):
        @functools.wraps(route)
        async def handler(*args, **kwargs):
            try:
                return await route(*args, **kwargs)
            except ProtocolError as e:
                return error_response(proto, e)
            except Exception as e:  # a bug: still answered in the API's shape, not as a plain-text page
                log.exception("unexpected error in %s", route.__name__)
                return error_response(proto, internal_error(e))
        return handler
    return wrap


def internal_error(e: Exception) -> ProtocolError:
    return ProtocolError(500, f"internal error: {type(e).__name__}: {e}", "internal")


def error_response(proto, err: ProtocolError) -> JSONResponse:
    headers = {"x-should-retry": "true", "retry-after": "1"} if err.status == 503 else None
    status = proto.error_status(err) if hasattr(proto, "error_status") else err.status  # Anthropic: 529
    return JSONResponse(proto.error_body(err), status_code=status, headers=headers)


async def frames(out: Output, events: AsyncIterator, close: Callable[[], None]) -> AsyncIterator[str]:
    """out's frames for each event, then its end (or its error frames): a StreamingResponse's body.
    Starlette cancels this generator when the client disconnects; the finally calls close (it cancels the
    generation)."""
    try:
        async for ev in events:
            for frame in out.feed(ev):
                yield frame
        for frame in out.end():
            yield frame
    except ProtocolError as e:
        for frame in out.fail(e):
            yield frame
    except Exception as e:  # a bug: the client still gets the API's error frame, not a cut stream
        log.exception("unexpected error while streaming")
        for frame in out.fail(internal_error(e)):
            yield frame
    finally:
        close()


async def collect(request: Request, out: Output, events: AsyncIterator, close: Callable[[], None]) -> bool:
    """Feeds every event to out -> True; a client that disconnects meanwhile -> False. close is called
    either way (it cancels the generation)."""
    async def consume():
        async for ev in events:
            out.feed(ev)

    task = asyncio.create_task(consume())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return False
        await task
        return True
    finally:
        close()
