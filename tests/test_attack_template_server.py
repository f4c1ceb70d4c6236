"""A model whose chat template never finishes costs its own requests a bounded 400 and nobody else
anything: seven such requests at once leave a normal model's requests answered as usual; a render for a
client that left is cancelled."""
import asyncio
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from llamay.server.http import off_loop
from server_thread import ServerThread

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fuzz_gguf import STRING, apply, tiny_decoder  # noqa: E402

pytestmark = pytest.mark.model
FOREVER = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


@pytest.fixture(scope="module")
def server(smollm_path, tmp_path_factory):
    hostile = tmp_path_factory.mktemp("hostile") / "forever.gguf"
    hostile.write_bytes(apply(tiny_decoder(), [["set", "tokenizer.chat_template", FOREVER, STRING]]).to_bytes())
    s = ServerThread(["-m", str(smollm_path), "-m", str(hostile), "--threads", "2", "-c", "512"])
    yield s
    s.stop()


def _chat(url: str, model: str) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    r = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
        "model": model, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4, "temperature": 0})
    return r.status_code, r.json(), time.monotonic() - t0


def test_seven_never_ending_templates_leave_a_normal_model_served(server):
    normal = server.registry.resolve(None)
    hostile = next(name for name in server.registry.paths if name != normal)
    assert _chat(server.url, normal)[0] == 200  # loaded and warm
    with ThreadPoolExecutor(8) as pool:
        bad = [pool.submit(_chat, server.url, hostile) for _ in range(7)]
        time.sleep(0.3)
        status, _, took = _chat(server.url, normal)
        assert status == 200 and took < 10, took
        for f in bad:
            status, body, took = f.result()
            assert status == 400 and "chat template" in body["error"]["message"], body
            assert "limit" in body["error"]["message"] and took < 30


class _Leaving:
    """A request whose client has gone after `after` seconds."""

    def __init__(self, after: float):
        self.t_gone = time.monotonic() + after

    async def is_disconnected(self) -> bool:
        return time.monotonic() >= self.t_gone


def test_work_for_a_client_that_left_is_cancelled():
    def render(seconds: float, cancel: threading.Event) -> str:
        return "cancelled" if cancel.wait(seconds) else "finished"

    assert asyncio.run(off_loop(_Leaving(0.3), render, 30.0)) == "cancelled"  # before its 30 s
    assert asyncio.run(off_loop(_Leaving(60), render, 0.1)) == "finished"
