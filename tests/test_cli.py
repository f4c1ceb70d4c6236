"""The llamay command: clear one-line errors, and `run -p` printing what the API generates."""
import subprocess
import sys

import pytest

import llamay
from llamay.cli.main import main
from llamay.gguf import GGUFWriter


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_missing_file_is_one_line_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", "-m", str(tmp_path / "nope.gguf"), "-p", "hi")
    assert code == 1 and err.strip().count("\n") == 0 and f"no such file: {tmp_path / 'nope.gguf'}" in err


def test_non_gguf_file_is_one_line_error(capsys, tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"this is not a gguf file at all, just text" * 4)
    code, _, err = run_cli(capsys, "run", "-m", str(bad), "-p", "hi")
    assert code == 1 and "not a GGUF file" in err and "Traceback" not in err


@pytest.mark.parametrize("arch,words", [("plamo2", "state-space"), ("deepseek2", "latent attention"),
                                        ("bloomz-unknown", "not supported")])
def test_unsupported_architecture_is_refused(capsys, tmp_path, arch, words):
    w = GGUFWriter()
    w.add("general.architecture", arch)
    path = tmp_path / f"{arch}.gguf"
    w.write(path)
    code, _, err = run_cli(capsys, "run", "-m", str(path), "-p", "hi")
    assert code == 1 and arch in err and words in err


@pytest.mark.model
def test_run_prints_the_greedy_completion(capsys, smollm_path):
    code, out, _ = run_cli(capsys, "run", "-m", str(smollm_path), "-p", "The capital of France is",
                           "-n", "8", "--temp", "0")
    want = "".join(llamay.load(smollm_path).generate("The capital of France is", max_tokens=8, temperature=0))
    assert code == 0 and out == want + "\n"


@pytest.mark.model
def test_tokenize_command_prints_ids(capsys, smollm_path):
    code, out, _ = run_cli(capsys, "tokenize", "-m", str(smollm_path), "--ids", "The capital of France is")
    assert code == 0 and out.split() == ["504", "3575", "282", "4649", "314"]  # llama.cpp's ids (anchors.json)


@pytest.mark.model
def test_console_script_chat_reads_stdin(smollm_path):
    """--interactive: the chat reads a pipe's lines (without it, piped input is one message)."""
    proc = subprocess.run([sys.executable, "-m", "llamay.cli.main", "run", "-m", str(smollm_path), "-n", "4",
                           "--temp", "0", "--interactive"], input="Hi\n\n", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Chat with the model" in proc.stderr and len(proc.stdout.strip()) > 0


@pytest.mark.parametrize("text,want", [("512M", 512 << 20), ("2GiB", 2 << 30), ("1.5g", 3 << 29), ("1000", 1000)])
def test_kv_budget_sizes_parse(text, want):
    from llamay.cli.common import parse_size
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "abc", "-5M", "12 parsecs", "0"])
def test_bad_kv_budget_is_refused(text):
    import argparse
    from llamay.cli.common import parse_size
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


@pytest.mark.model
def test_ctx_create_fork_show_gen(capsys, tmp_path, smollm_path):
    base, branches = tmp_path / "base.llamayctx", tmp_path / "branches"
    code, out, _ = run_cli(capsys, "ctx", "create", "-m", str(smollm_path), "-p", "Once upon a time, in a land",
                           "-o", str(base))
    assert code == 0 and base.exists() and "tokens" in out
    code, out, _ = run_cli(capsys, "ctx", "fork", "-m", str(smollm_path), "-i", str(base), "-n", "3",
                           "-o", str(branches))
    assert code == 0 and "0 pages allocated" in out
    assert sorted(p.name for p in branches.iterdir()) == [f"branch-{i}.llamayctx" for i in range(3)]
    code, out, _ = run_cli(capsys, "ctx", "show", str(branches / "branch-1.llamayctx"))
    want_ids = llamay.load(smollm_path).tokenize("Once upon a time, in a land", parse_special=True)
    assert code == 0 and f"tokens        {len(want_ids)}" in out and "llama" in out
    code, out, _ = run_cli(capsys, "ctx", "gen", "-m", str(smollm_path), "-i", str(base), "-n", "5",
                           "--temp", "0")
    llm = llamay.load(smollm_path)
    want = "".join(llm.create_context(want_ids).generate(max_tokens=5, temperature=0))
    assert code == 0 and out == want + "\n"


def test_ctx_show_of_a_broken_file_is_one_line_error(capsys, tmp_path):
    bad = tmp_path / "bad.llamayctx"
    bad.write_bytes(b"LLAMAYCX" + b"\0" * 40)
    code, _, err = run_cli(capsys, "ctx", "show", str(bad))
    assert code == 1 and err.startswith("llamay: error:") and "Traceback" not in err


@pytest.mark.model
def test_verify_passes_on_the_default_model(capsys, smollm_path):
    code, out, err = run_cli(capsys, "verify", "-m", str(smollm_path), "--tokens", "12")
    assert code == 0, out
    from llamay.kernels import _lib
    table, advice = out.split("\n\n")  # the checks, then which KV types suit the model
    rows = table.splitlines()[1:]
    assert advice.startswith("KV types: f16, q8, vq8 fine on this model")
    # 4 state checks, 2 other thread counts, each other kernel path, 3 KV types
    assert len(rows) == 4 + 2 + len(_lib.available()) - 1 + 3 and all("  ok  " in r for r in rows)
    assert f"verifying  100%  {len(rows)}/{len(rows)} checks" in err  # the bar's total is the checks made
    for path in (p for p in _lib.available() if p != _lib.current()):  # the path in use is measured, not the widest
        assert any(r.startswith(f"{path} kernels == {_lib.current()} kernels") for r in rows), path


@pytest.mark.model
def test_bench_json_reports_positive_rates(capsys, smollm_path):
    import json

    from llamay.kernels import _lib
    code, out, _ = run_cli(capsys, "bench", "-m", str(smollm_path), "--prefill", "16", "--decode", "4",
                           "-r", "1", "--json")
    r = json.loads(out)
    assert code == 0 and r["prefill_tok_s"] > 0 and r["decode_tok_s"] > 0 and r["n_prefill"] == 16
    assert r["kernels"] == _lib.current()


def test_serve_warns_only_off_loopback():
    from llamay.server.guard import is_loopback
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.org")


def test_serve_says_where_the_studio_is(capsys, monkeypatch, smollm_path):
    import socket

    import uvicorn
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets: [s.close() for s in sockets])  # not served
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["serve", "-m", str(smollm_path), "--port", str(port), "-q"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[-2].startswith("llamay: serving smollm2:135m on http://127.0.0.1:")
    assert lines[-1] == f"llamay: Studio: http://127.0.0.1:{port}/studio"
