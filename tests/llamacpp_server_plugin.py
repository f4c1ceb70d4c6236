"""A pytest plugin that points llama.cpp's server test suite (tools/server/tests of the tree llamacpp_tree
fetches) at `llamay serve`: loaded with `-p llamacpp_server_plugin` in the suite's directory, tests/ on
sys.path. It makes the suite's llama-server binary the shim (llamacpp_server_shim.py), gives it a free port,
skips the presets' start-up download of every model (the shim maps them to local files) and writes each
test's outcome to $LLAMAY_SUITE_REPORT (JSON lines: nodeid, outcome) when set. Nothing of the suite is
changed on disk."""
from __future__ import annotations

import json
import os
import socket
import stat
import sys
import tempfile
import types
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shim_binary() -> str:
    """An executable that runs the shim under this interpreter (the suite Popens a path, not a command)."""
    folder = Path(tempfile.mkdtemp(prefix="llamay-suite-bin-"))
    path = folder / "llama-server"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{_HERE / "llamacpp_server_shim.py"}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _install():
    """Before the suite's conftest is imported (plugins given by -p load first); the cwd is the suite's."""
    sys.modules.setdefault("wget", types.ModuleType("wget"))  # utils imports it for the vision tests' images
    os.environ["LLAMA_SERVER_BIN_PATH"] = _shim_binary()
    os.environ.setdefault("PORT", str(_free_port()))
    os.environ.setdefault("LLAMAY_CACHE_DISK", "0")
    sys.path.insert(0, os.getcwd())
    import utils  # the suite's; its conftest's `from utils import *` finds this module
    utils.ServerPreset.load_all = staticmethod(lambda: None)


_install()


def pytest_runtest_logreport(report):
    path = os.environ.get("LLAMAY_SUITE_REPORT")
    if not path or (report.when != "call" and report.outcome == "passed"):
        return  # one line per test: its call, or the setup or teardown that failed or skipped it
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome}) + "\n")
