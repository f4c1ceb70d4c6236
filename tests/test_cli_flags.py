"""Command-line basics: bare `llamay` prints help, --version, and flag values checked with the valid range
in a one-line error and exit status 1 (argparse's own usage errors included) before any model loads."""
import subprocess
import sys

import pytest

from llamay import __version__
from llamay.cli.main import main


def llamay(*argv):
    return subprocess.run([sys.executable, "-m", "llamay.cli.main", *argv], capture_output=True, text=True, timeout=60)


def test_bare_llamay_prints_help_and_version_is_there():
    r = llamay()
    assert r.returncode == 0 and "usage: llamay" in r.stdout and "quantize" in r.stdout
    r = llamay("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"llamay {__version__}"


@pytest.mark.parametrize("argv, message", [
    (["run", "-n", "0", "-p", "x"], "0 would generate nothing"),
    (["run", "-n", "-5", "-p", "x"], "-5 is out of range: it must be >= -1"),
    (["run", "--temp", "-1", "-p", "x"], "--temp: -1 is out of range: it must be >= 0.0"),
    (["run", "--top-p", "5", "-p", "x"], "--top-p: 5 is out of range: it must be in [0.0, 1.0]"),
    (["run", "--top-k", "-3", "-p", "x"], "--top-k: -3 is out of range"),
    (["run", "--repeat-penalty", "0", "-p", "x"], "it must be > 0.0"),
    (["run", "-t", "0", "-p", "x"], "-t/--threads: 0 is out of range: it must be in [1, 512]"),
    (["run", "-t", "64x", "-p", "x"], "'64x' is not an integer"),
    (["run", "-c", "-1", "-p", "x"], "-c/--ctx-size: -1 is out of range"),
    (["serve", "--port", "99999"], "--port: 99999 is out of range: it must be in [1, 65535]"),
    (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["bench", "-r", "0"], "-r/--reps: 0 is out of range: it must be >= 1"),
    (["bench", "--prefill", "0"], "--prefill: 0 is out of range"),
    (["verify", "--tokens", "1"], "--tokens: 1 is out of range: it must be >= 2"),
    (["ctx", "fork", "-i", "x", "-o", "y", "-n", "0"], "-n: 0 is out of range"),
    (["ctx", "gen", "-i", "x", "--temp", "-1"], "--temp: -1 is out of range"),
    (["serve", "-np", "0"], "0 is out of range: it must be in [1, 256]"),
    (["serve", "--queue", "-1"], "--queue: -1 is out of range"),
    (["tokenize", "--kv", "f16", "hi"], "unrecognized arguments"),  # tokenize has no KV cache to choose
])
def test_bad_flag_values_are_one_line_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 1 and message in err and len(err.strip().splitlines()) == 1, err


def test_an_empty_prompt_is_refused(capsys):
    assert main(["run", "-p", ""]) == 1
    assert "the prompt is empty" in capsys.readouterr().err
