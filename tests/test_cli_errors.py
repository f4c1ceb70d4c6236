"""Every CLI failure is one line `llamay: error: ...` with exit status 1 (a missing file said as one),
help shows defaults, the default model answers to its short name, -f/--stop, progress on long work, and
`ps`/`stop` against a running server."""
import re
import subprocess
import sys

import pytest

from llamay.cli.main import main
from llamay.cli.ps import server_url
from llamay.defaults import DEFAULT_NAME


def llamay(*argv, stdin=None, env=None):
    return subprocess.run([sys.executable, "-m", "llamay.cli.main", *argv], capture_output=True, text=True,
                          timeout=120, input=stdin, env=env)


def one_line_error(capsys, argv, code=1) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("llamay: error: "), err
    return err


@pytest.mark.parametrize("argv, message", [
    (["run", "-m", "/nope.gguf", "-p", "x"], "no such file: /nope.gguf"),
    (["embed", "-m", "/a/b/nope.gguf", "x"], "no such file: /a/b/nope.gguf"),
    (["run", "-m", "./x/nope.gguf", "-p", "x"], "no such file: ./x/nope.gguf"),
    (["run", "-m", "no-such-model:7b", "-p", "x"], "no-such-model:7b is neither a file nor a stored model"),
    (["run", "-p", "x", "-f", "/nope.txt"], "give -p or -f, not both"),
    (["run", "-f", "/nope.txt"], "cannot read /nope.txt: No such file or directory"),
    (["serve", "-m", "/nope.gguf"], "no such file: /nope.gguf"),
    (["serve", "-ctk", "q8_0", "-ctv", "f16"], "-ctk q8_0 -ctv f16: llamay has no such KV cache"),
    (["serve", "--kv", "f32", "-ctk", "q8_0", "-ctv", "q8_0"], "--kv f32 and -ctk q8_0 -ctv q8_0 disagree"),
])
def test_failures_are_one_line(capsys, argv, message):
    assert message in one_line_error(capsys, argv)


def test_a_file_that_is_not_gguf(capsys, tmp_path):
    bad = tmp_path / "notgguf.gguf"
    bad.write_bytes(b"hello")
    assert "not a GGUF file" in one_line_error(capsys, ["verify", "-m", str(bad)])
    assert "not a GGUF file" in one_line_error(capsys, ["tokenize", "-m", str(bad), "hi"])
    # serve checks the file before it says it is serving (and before it binds)
    err = one_line_error(capsys, ["serve", "-m", str(bad), "--port", "1"])
    assert "not a GGUF file" in err and "serving" not in err


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert "(default 512)" in out and "(default 3)" in out and "(default: f16)" not in out
    with pytest.raises(SystemExit):
        main(["ctx", "gen", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "maximum tokens to generate (default: 128)" in out and "(default: 0.8)" in out


def test_internal_errors_are_one_line_and_a_broken_pipe_is_quiet(monkeypatch, capsys):
    from llamay.cli import tokenize

    def boom(args):
        raise RuntimeError("a bug")
    monkeypatch.setattr(tokenize, "run", boom)
    monkeypatch.delenv("LLAMAY_DEBUG", raising=False)
    err = one_line_error(capsys, ["tokenize", "hi"])
    assert "internal error: RuntimeError: a bug (LLAMAY_DEBUG=1 shows where)" in err
    monkeypatch.setenv("LLAMAY_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["tokenize", "hi"])


def test_broken_pipe_exits_quietly(smollm_path):
    """`llamay tokenize ... | head -1`: the reader leaves; no traceback, the pipe's exit status."""
    r = subprocess.run(f"{sys.executable} -m llamay.cli.main tokenize -m {smollm_path} "
                       f"\"$(printf 'word %.0s' $(seq 3000))\" | head -1", shell=True, capture_output=True, text=True,
                       timeout=120, executable="/bin/bash")
    assert r.returncode == 0 and r.stdout.count("\n") == 1 and r.stderr == "", r.stderr


def test_the_short_name_and_prompt_files(smollm_path, tmp_path):
    """The default model answers to DEFAULT_NAME without being stored; -f reads the prompt; --stop cuts."""
    prompt = tmp_path / "p.txt"
    prompt.write_text("1, 2, 3, 4, 5,")
    base = ["run", "-m", DEFAULT_NAME, "--temp", "0", "-n", "8"]
    whole = llamay(*base, "-f", str(prompt))
    assert whole.returncode == 0, whole.stderr
    assert llamay(*base, "-p", "1, 2, 3, 4, 5,").stdout == whole.stdout  # -f == -p
    assert llamay(*base, "-f", "-", stdin="1, 2, 3, 4, 5,").stdout == whole.stdout
    text = whole.stdout.rstrip("\n")
    cut = text.index(",", 1)  # stop at the first comma after the first character
    stopped = llamay(*base, "-f", str(prompt), "--stop", ",")
    assert stopped.stdout.rstrip("\n") == text[:cut], (text, stopped.stdout)


def test_progress_bars_on_long_work(smollm_path, tmp_path):
    r = llamay("bench", "-m", str(smollm_path), "--prefill", "8", "--decode", "2", "-r", "1")
    assert r.returncode == 0 and "benchmarking  100%  3/3 runs" in r.stderr, r.stderr
    long = " ".join(["word"] * 700)
    out = tmp_path / "c.llamayctx"
    r = llamay("ctx", "create", "-m", str(smollm_path), "-p", long, "-o", str(out))
    done = re.search(r"prefilling  100%  (\d+)/(\d+) tokens", r.stderr)
    assert r.returncode == 0 and done and done[1] == done[2], r.stderr
    # the chunked prefill saved the same context as one create of the same tokens does
    from llamay import load
    llm = load(str(smollm_path), n_ctx=1024)
    ctx = llm.create_context(long)
    one = tmp_path / "one.llamayctx"
    ctx.save(str(one))
    assert llm.restore_context(str(out)).tokens == ctx.tokens and len(ctx.tokens) == int(done[1]) > 512
    more = llm.tokenize(" and the end", add_special=False)
    assert (llm.restore_context(str(out)).extend(more) == llm.restore_context(str(one)).extend(more)).all()


def test_server_url():
    assert server_url("example.org") == "http://example.org:11435"
    assert server_url("127.0.0.1:9") == "http://127.0.0.1:9"
    assert server_url("https://h:1/") == "https://h:1"
    assert server_url("[::1]") == "http://[::1]:11435"


def test_ps_and_stop(smollm_path, capsys):
    import httpx

    from conftest import LiveServer
    server = LiveServer(["-m", str(smollm_path), "--threads", "2"])
    try:
        _ps_and_stop(server, server.registry.resolve(None), capsys, httpx)
    finally:
        server.stop()


def _ps_and_stop(live_server, model, capsys, httpx):
    host = live_server.url
    assert main(["ps", "--host", host]) == 0
    httpx.post(host + "/api/generate", json={"model": model, "prompt": "Hi", "stream": False,
                                            "options": {"num_predict": 1}}, timeout=60)
    assert main(["ps", "--host", host]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]
    assert lines[-1].startswith(model) and "100% CPU" in lines[-1] and "from now" in lines[-1]
    assert "is not loaded" in one_line_error(capsys, ["stop", "nope", "--host", host])
    assert main(["stop", model, "--host", host]) == 0
    assert model not in live_server.registry.loaded
    assert "no server at http://127.0.0.1:1" in one_line_error(capsys, ["ps", "--host", "127.0.0.1:1"])


def test_spec_flag_changes_no_token(smollm_path):
    """run --spec ngram (the default) prints what --spec none prints, and --verbose shows the drafts."""
    prompt = "a = [1, 2, 3]\nb = [1, 2, 3]\nc = [1, 2, 3]\n"
    base = ["run", "-m", str(smollm_path), "-p", prompt, "-n", "40", "--temp", "0", "--verbose"]
    spec, plain = llamay(*base), llamay(*base, "--spec", "none")
    assert spec.returncode == plain.returncode == 0 and spec.stdout == plain.stdout
    assert "draft tokens accepted" in spec.stderr and "draft tokens" not in plain.stderr


def test_notes_when_a_value_is_changed(capsys, smollm_path):
    """-c over the training context and a --kv-budget under one context load anyway, each with a note."""
    assert main(["run", "-m", str(smollm_path), "-p", "Hi", "-n", "1", "-c", "99999", "--kv-budget", "1K"]) == 0
    err = capsys.readouterr().err
    assert "llamay: note: -c 99999 is over the model's training context: using 8192" in err
    assert "llamay: note: --kv-budget 1024 bytes is under one full context: using" in err


def test_a_taken_port_is_one_line_before_serving(capsys, smollm_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        err = one_line_error(capsys, ["serve", "-m", str(smollm_path), "--port", str(port)])
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err and "serving" not in err
        assert main(["serve", "-m", str(smollm_path), "--port", str(port), "-ngl", "99"]) == 1
    note, error = capsys.readouterr().err.splitlines()
    assert note == "llamay: note: -ngl 99 is ignored: llamay runs on the CPU" and "cannot listen" in error
