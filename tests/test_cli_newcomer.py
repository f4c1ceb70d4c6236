"""A newcomer's first hour (issue 33): Ollama's positionals, names where blob paths were, whole help lines,
one-line errors for missing files and an offline pull, and a README that matches the commands."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamay.cli.main import COMMANDS, build_parser, main
from llamay.defaults import DEFAULT_NAME

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # what a user reads


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("llamay: error: "), err
    return err


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    return tmp_path / "home"


@pytest.fixture
def stored(home, smollm_path):
    """SmolLM2 stored as smol:test in a fresh store: the first (and only) stored model."""
    from llamay.store import Store
    from llamay.store.names import parse_name
    store = Store()
    digest = store.add_file(smollm_path)
    store.write_manifest(parse_name("smol:test"), store.make_manifest(digest, smollm_path.stat().st_size))
    return "smol:test"


# 1. Ollama's positionals

@pytest.mark.model
def test_run_model_prompt_answers_through_the_chat_template(capsys, smollm_path):
    import llamay
    from llamay.cli.conversation import Conversation
    question = "Why is the sky blue?"
    assert main(["run", DEFAULT_NAME, question, "-n", "8", "--temp", "0"]) == 0
    out = capsys.readouterr().out
    assert main(["run", DEFAULT_NAME, "-n", "8", "--temp", "0", question]) == 0  # options between them too
    assert capsys.readouterr().out == out
    conv = Conversation(llamay.load(smollm_path))
    conv.messages.append({"role": "user", "content": question})
    want = "".join(conv.llm.generate(conv.prompt(), max_tokens=8, temperature=0))
    assert out == want + "\n"
    # -p keeps completing without a template, with the model given either way
    assert main(["run", DEFAULT_NAME, "-p", "The capital of France is", "-n", "3", "--temp", "0"]) == 0
    by_position = capsys.readouterr().out
    assert main(["run", "-m", DEFAULT_NAME, "-p", "The capital of France is", "-n", "3", "--temp", "0"]) == 0
    assert capsys.readouterr().out == by_position


@pytest.mark.parametrize("argv, message", [
    (["run", "a:1", "-m", "b:1"], "give the model as MODEL or -m, not both"),
    (["run", "a:1", "hi", "-p", "x"], "give the prompt as PROMPT, -p or -f, not two of them"),
    (["run", "a:1", "hi", "-f", "x.txt"], "give the prompt as PROMPT, -p or -f, not two of them"),
    (["run", "Why is the sky blue?"], "not a model name: the model comes first (llamay run MODEL PROMPT)"),
])
def test_run_positionals_with_flags_are_one_line(capsys, argv, message):
    assert message in one_line_error(capsys, argv)


def test_a_model_not_stored_says_how_to_pull_it(capsys, home):
    err = one_line_error(capsys, ["run", "qwen2.5:0.5b", "Why is the sky blue?"])
    assert "qwen2.5:0.5b is neither a file nor a stored model" in err and "llamay pull qwen2.5:0.5b" in err


def test_ollamas_other_positionals():
    p = build_parser()
    assert p.parse_args(["pull", "a:1"]).name == "a:1"
    assert p.parse_args(["show", "a:1"]).name == "a:1"
    assert p.parse_args(["rm", "a:1", "b:2"]).names == ["a:1", "b:2"]
    args = p.parse_args(["cp", "a:1", "b:2"])
    assert (args.source, args.destination) == ("a:1", "b:2")
    assert p.parse_args(["stop", "a:1"]).name == "a:1"
    assert p.parse_args(["ps"]).command == "ps"


# 2. names where blob paths were

@pytest.mark.model
def test_bench_embed_and_cache_name_the_model(capsys, stored, smollm_path, tmp_path):
    for argv in (["-m", stored], []):
        assert main(["bench", *argv, "--prefill", "4", "--decode", "2", "-r", "1", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["model"] == stored
        assert main(["embed", *argv, "hi"]) == 0
        assert json.loads(capsys.readouterr().out)["model"] == stored
    assert main(["embed", "-m", str(smollm_path), "hi"]) == 0  # -m as given (Ollama's API echoes the request's)
    assert json.loads(capsys.readouterr().out)["model"] == str(smollm_path)
    assert main(["bench", "-m", str(smollm_path), "--prefill", "4", "--decode", "2", "-r", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == smollm_path.name
    cache = tmp_path / "kv"
    assert main(["run", stored, "-p", "Hi", "-n", "1", "--cache-disk", "64M", "--cache-dir", str(cache)]) == 0
    capsys.readouterr()
    assert main(["cache", "ls", "--cache-dir", str(cache)]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.split()[0] == stored and "sha256-" not in row


@pytest.mark.model
def test_chat_show_names_the_model(stored, home):
    env = {**os.environ, "LLAMAY_HOME": str(home), "OLLAMA_MODELS": os.environ["OLLAMA_MODELS"]}
    r = subprocess.run([sys.executable, "-m", "llamay.cli.main", "run", stored, "--interactive"], input="/show\n", env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"model: {stored}\n" in r.stderr and "blobs" not in r.stderr


# 3. verify's KV line and the README say the same

def test_verify_says_which_kv_figure_is_judged():
    from llamay.measure.verify import KV_RULE, Check, kv_advice
    good = Check("KV f16: next-token TV vs f32", True, 0.1, "mean TV 3.22%, max 5.74%", mean_tv=0.0322)
    bad = Check("KV q8: next-token TV vs f32", False, 0.9, "mean TV 7.00%, max 9.00%", mean_tv=0.07)
    assert "f16" in kv_advice([good]) and "--kv f32" not in kv_advice([good]).split("(")[0]
    assert "use --kv f32" in kv_advice([good, bad]) and "q8" in kv_advice([good, bad])
    readme = " ".join(" ".join(p.read_text(encoding="utf-8") for p in DOCS).replace("`", "").split())
    assert KV_RULE in readme


# 4. whole summaries in `llamay --help`

def test_help_summaries_are_whole(capsys):
    from llamay.cli.main import summary
    with pytest.raises(SystemExit):
        main(["--help"])
    text = re.sub(r"(\w-) (\w)", r"\1\2", " ".join(capsys.readouterr().out.split()))  # argparse's wraps undone
    for name, module in COMMANDS.items():
        first = summary(module.__doc__)
        assert first.endswith("."), (name, first)
        assert first in text, (name, first)
        paragraph = " ".join(module.__doc__.strip().split("\n\n")[0].split())
        assert paragraph.startswith(first)


# 5. a missing file is `no such file: X`

@pytest.mark.parametrize("argv", [
    ["ctx", "show", "nosuch"],
    ["ctx", "gen", "-i", "nosuch"],
    ["ctx", "fork", "-i", "nosuch", "-o", "out"],
    ["tokenize", "-m", "./nosuch.gguf", "hi"],
    ["embed", "-m", "./nosuch.gguf", "hi"],
    ["quantize", "./nosuch.gguf", "out.gguf", "Q8_0"],
])
def test_a_missing_file_is_one_line(capsys, argv):
    name = next(a for a in argv if "nosuch" in a)
    err = one_line_error(capsys, argv)
    assert f"no such file: {name}" in err and "Errno" not in err


@pytest.mark.model
def test_missing_inputs_and_output_folders_are_one_line(capsys, smollm_path, tmp_path):
    err = one_line_error(capsys, ["quantize", str(smollm_path), str(tmp_path / "o.gguf"), "Q8_0", "--imatrix", "nosuch"])
    assert "no such file: nosuch" in err
    for argv in (["quantize", str(smollm_path), "/nonexistent/o.gguf", "Q8_0"],
                 ["ctx", "create", "-m", str(smollm_path), "-p", "hi", "-o", "/nonexistent/x.llamayctx"]):
        err = one_line_error(capsys, argv)
        assert "no such folder: /nonexistent" in err and "Errno" not in err and ".tmp" not in err


# 6. an offline pull

@pytest.mark.parametrize("variable, value, name, host", [
    ("LLAMAY_REGISTRY", "http://nonexistent.invalid", "x:y", "nonexistent.invalid"),
    ("LLAMAY_REGISTRY", "http://127.0.0.1:1", "x:y", "127.0.0.1:1"),
    ("LLAMAY_HF_ENDPOINT", "http://nonexistent.invalid", "hf.co/a/b:Q4_K_M", "nonexistent.invalid"),
    ("PIP_INDEX_URL", "http://127.0.0.1:1/simple", "pypi:llm-nothing==1.0", "127.0.0.1:1"),
])
def test_an_offline_pull_is_one_line(capsys, home, monkeypatch, variable, value, name, host):
    monkeypatch.setenv(variable, value)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert main(["pull", name]) == 1
    err = capsys.readouterr().err.splitlines()[-1]  # after the progress's status lines
    assert err.startswith("llamay: error: "), err
    assert f"cannot reach {host}" in err and "nothing was written" in err and "Errno" not in err, err
    assert not [p for p in home.rglob("*") if p.is_file()]


# 7. the README's context ids can be copied

def test_readme_context_ids_are_not_made_up():
    text = " ".join(p.read_text(encoding="utf-8") for p in DOCS)
    assert not re.search(r"\bctx_\d\b", text)


# 1b. piped standard input (Ollama's `echo "why is the sky blue" | ollama run MODEL`)

def _run_piped(argv: list[str], stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamay.cli.main", "run", *argv], input=stdin, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.model
def test_piped_input_is_one_message_answered_once(capsys, smollm_path):
    """The whole input, several lines, is one message (not a chat of two turns), answered once; with PROMPT,
    Ollama's order: the input, a space, PROMPT."""
    question = "Why is the sky blue?\nAnswer in one word.\n"
    piped = _run_piped([DEFAULT_NAME, "-n", "8", "--temp", "0"], question)
    assert piped.returncode == 0, piped.stderr
    assert "Chat with the model" not in piped.stderr
    assert main(["run", DEFAULT_NAME, question, "-n", "8", "--temp", "0"]) == 0  # pytest's stdin: not piped
    assert piped.stdout == capsys.readouterr().out and piped.stdout.strip()
    both = _run_piped([DEFAULT_NAME, "Summarize it.", "-n", "8", "--temp", "0"], "The sky is blue.\n")
    assert both.returncode == 0, both.stderr
    assert main(["run", DEFAULT_NAME, "The sky is blue.\n Summarize it.", "-n", "8", "--temp", "0"]) == 0
    assert both.stdout == capsys.readouterr().out
    raw = _run_piped([DEFAULT_NAME, "-p", "The capital of France is", "-n", "3", "--temp", "0"], "ignored")
    assert main(["run", DEFAULT_NAME, "-p", "The capital of France is", "-n", "3", "--temp", "0"]) == 0
    assert raw.stdout == capsys.readouterr().out  # -p names the prompt: stdin is not read


def test_empty_piped_input_and_interactive_with_a_prompt_are_one_line_errors(capsys, monkeypatch):
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert "standard input is empty" in one_line_error(capsys, ["run", "a:1"])
    err = one_line_error(capsys, ["run", "a:1", "hi", "--interactive"])
    assert "--interactive is a chat: give it no PROMPT, -p or -f" in err
