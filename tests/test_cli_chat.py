"""`llamay run`'s interactive chat, driven as a user drives it: through a pseudo-terminal (readline on, Ctrl-C
the terminal's SIGINT), asserting on what the user sees, the files it leaves and exit codes; and its input
rules (commands, multi-line messages, /set values, chat names) as pure functions."""
import codecs
import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

import llamay
from llamay.chat import prompt_ids, template_for
from llamay.cli.chat_commands import check_name, parse_param, read_message, split_command
from llamay.cli.main import main

PROMPT = ">>> "
TIMINGS = re.compile(r"prompt: (\d+) tokens \((\d+) cached\)")


# how long an expected output may take: a hang's guard, not a speed check (a loaded machine is slow)
HANG_S = 600


# the child's first step, after exec: the terminal on its standard input becomes its controlling terminal
# (so Ctrl-C there is its SIGINT), SIGINT is ignored as in a job that a non-interactive shell started in the
# background (the chat must take Ctrl-C all the same: it did nothing there, and the session below waited for
# its prompt forever), then llamay's CLI replaces it. No Python runs in a forked copy of the threaded test
# process.
BOOT = ("import fcntl, os, signal, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
        "signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "os.execv(sys.executable, [sys.executable, '-m', 'llamay.cli.main', *sys.argv[1:]])")


class Terminal:
    """`python -m llamay.cli.main ARGV` with a pseudo-terminal as its stdin, stdout and stderr."""

    def __init__(self, argv: list[str], home):
        env = {**os.environ, "LLAMAY_HOME": str(home), "TERM": "dumb"}
        fd, tty = os.openpty()
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))  # wide: readline never wraps
        proc = subprocess.Popen([sys.executable, "-c", BOOT, *argv], stdin=tty, stdout=tty, stderr=tty, env=env,
                                start_new_session=True)
        os.close(tty)
        self.proc, self.fd, self.out = proc, fd, ""
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode

    def _read(self, timeout: float) -> bool:
        """Appends what the child wrote within timeout (\\r\\n as \\n) -> False once it has closed the terminal."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return True
        try:
            data = os.read(self.fd, 1 << 16)
        except OSError:  # EIO: no writer left
            data = b""
        self.out = (self.out + self._decode(data)).replace("\r\n", "\n")
        return bool(data)

    def expect(self, text: str, timeout: float = HANG_S) -> str:
        """Reads until text -> what came before it (both consumed)."""
        deadline = time.monotonic() + timeout
        while text not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} within {timeout} s; the terminal shows: {self.out[-1500:]!r}"
            assert self._read(left), f"the chat ended before {text!r}; the terminal shows: {self.out[-1500:]!r}"
        before, _, self.out = self.out.partition(text)
        return before

    def some(self, n_chars: int, timeout: float = HANG_S):
        """Waits until n_chars more are shown (not consumed)."""
        want, deadline = len(self.out) + n_chars, time.monotonic() + timeout
        while len(self.out) < want:
            assert time.monotonic() < deadline and self._read(0.1), f"no output: {self.out[-1500:]!r}"

    def line(self, text: str) -> str:
        """Types text and Enter -> everything up to the next prompt."""
        os.write(self.fd, text.encode() + b"\r")
        return self.expect(PROMPT)

    def key(self, byte: bytes):
        """A control key, after a pause: CPython's readline sees a SIGINT that lands between printing the prompt
        and waiting for input only at the next key, and a person is never that quick."""
        time.sleep(0.3)
        os.write(self.fd, byte)

    def exit_code(self, timeout: float = HANG_S) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"the chat did not exit; the terminal shows: {self.out[-1500:]!r}"
            self._read(0.05)
        return self.proc.returncode

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.fd)


def cached(text: str) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of the one --verbose timings line in text."""
    (found,) = TIMINGS.findall(text)
    return int(found[0]), int(found[1])


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("llamay-home")


@pytest.fixture(scope="module")
def session(smollm_path, home):
    """One chat under a terminal, a transcript per step: what each input made the terminal show."""
    term = Terminal(["run", "-m", str(smollm_path), "--temp", "0", "-n", "8", "--verbose",
                     "--system", "You are a pirate."], home)
    try:
        shown = {"start": term.expect(PROMPT, timeout=HANG_S)}
        for step in ["/?", "/nosuch arg", "/set temperature -1", "/set top_k many", "/set num_predict 0",
                     "/set top_k 5", "/show"]:
            shown[step] = term.line(step)
        term.key(b"\x03")  # Ctrl-C at the prompt
        shown["ctrl-c at the prompt"] = term.expect(PROMPT)
        os.write(term.fd, b'"""\r')  # a multi-line message
        term.expect("... ")
        os.write(term.fd, b"Name two colours.\r")
        term.expect("... ")
        shown["multi-line"] = term.line('Only two."""')
        term.line("/set num_predict 2000")
        os.write(term.fd, b"Write a long story about a dragon and a knight.\r")
        term.expect("knight.\n")  # the echo; then the reply streams
        term.some(40)
        term.key(b"\x03")  # Ctrl-C during the reply
        shown["ctrl-c in a reply"] = term.expect(PROMPT, timeout=HANG_S)
        term.line("/set num_predict 8")
        shown["after ctrl-c"] = term.line("Hi")
        shown["/show after"] = term.line("/show")
        shown["/save ../evil"] = term.line("/save ../evil")
        shown["/save"] = term.line("/save s1")
        os.write(term.fd, b"/bye\r")
        shown["exit"] = term.exit_code()
    finally:
        term.close()
    return shown


@pytest.mark.model
def test_help_lists_the_commands(session):
    assert all(c in session["/?"] for c in ("/set", "/show", "/save", "/load", "/clear", "/bye", '"""'))


@pytest.mark.model
def test_an_unknown_command_is_a_hint_not_a_message(session):
    shown = session["/nosuch arg"]
    assert "Unknown command '/nosuch'. Type /? for help" in shown and not TIMINGS.search(shown)


@pytest.mark.model
def test_set_checks_values_in_one_line(session):
    assert "error: temperature: -1 is out of range: it must be >= 0.0" in session["/set temperature -1"]
    assert "error: top_k: 'many' is not an integer" in session["/set top_k many"]
    assert "num_predict: 0 would generate nothing" in session["/set num_predict 0"]
    assert "Set parameter 'top_k' to '5'" in session["/set top_k 5"]
    assert "top_k 5," in session["/show"] and "temperature 0.0," in session["/show"]  # the bad values changed nothing


@pytest.mark.model
def test_system_flag_starts_the_chat(session):
    assert "system: You are a pirate." in session["/show"]


@pytest.mark.model
def test_ctrl_c_at_the_prompt_hints_and_keeps_the_chat(session):
    assert "Use Ctrl + d or /bye to exit." in session["ctrl-c at the prompt"]


@pytest.mark.model
def test_a_reply_cut_by_the_length_limit_is_marked(session):
    shown = session["multi-line"]
    assert "[stopped: length limit]" in shown and cached(shown)[0] > 0


@pytest.mark.model
def test_ctrl_c_stops_a_reply_and_the_chat_answers_on(session):
    stopped = session["ctrl-c in a reply"]
    assert len(stopped) >= 40 and not TIMINGS.search(stopped)  # it streamed, then stopped unfinished
    assert TIMINGS.search(session["after ctrl-c"])  # the next message is answered
    # Ollama's rule: the stopped reply is dropped, its message stays: 2 + 1 + 2 messages
    assert "messages: 5;" in session["/show after"]


@pytest.mark.model
def test_save_writes_the_messages_and_refuses_bad_names(session, home):
    assert "is not a chat name" in session["/save ../evil"] and not (home / "evil.json").exists()
    assert re.search(r"Saved chat 's1' \(\d+ tokens\)", session["/save"])
    saved = json.loads((home / "chats" / "s1.json").read_text())
    assert saved["system"] == "You are a pirate."
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant", "user", "user", "assistant"]
    assert saved["messages"][0]["content"] == "\nName two colours.\nOnly two."  # Ollama keeps the first newline
    assert session["exit"] == 0


@pytest.mark.model
def test_history_is_kept_under_llamay_home(session, home):
    history = (home / "history").read_text()
    assert "/set top_k 5" in history and "/save s1" in history


@pytest.mark.model
def test_a_loaded_chat_continues_without_prefilling_it_again(session, smollm_path, home):
    n_saved = int(re.search(r"Saved chat 's1' \((\d+) tokens\)", session["/save"]).group(1))
    term = Terminal(["run", "-m", str(smollm_path), "--temp", "0", "-n", "4", "--verbose"], home)
    try:
        term.expect(PROMPT, timeout=HANG_S)
        assert f"Loaded chat 's1' (5 messages, {n_saved} tokens)" in term.line("/load s1")
        n_prompt, n_cached = cached(term.line("Go on."))
        assert n_cached == n_saved and n_prompt > n_saved  # only the new message was prefilled
        term.key(b"\x04")  # Ctrl-D
        assert term.exit_code() == 0
    finally:
        term.close()


@pytest.mark.model
def test_piped_lines_are_messages_and_bye_ends_them(smollm_path, home):
    """--interactive: a pipe's lines are the chat's (without it, the whole input is one message)."""
    proc = subprocess.run([sys.executable, "-m", "llamay.cli.main", "run", "-m", str(smollm_path), "--temp", "0",
                           "-n", "4", "--verbose", "--interactive"], input="Hi\n\n/load nothere\n/bye\nNot sent\n", capture_output=True,
                          text=True, timeout=HANG_S, env={**os.environ, "LLAMAY_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    assert len(TIMINGS.findall(proc.stderr)) == 1 and PROMPT not in proc.stdout and proc.stdout.strip()
    assert "error: no saved chat named 'nothere' (/save nothere makes one)" in proc.stderr


@pytest.mark.model
def test_prompt_with_system_goes_through_the_template(capsys, smollm_path):
    code = main(["run", "-m", str(smollm_path), "-p", "Hi", "--system", "You are a pirate.", "-n", "8", "--temp", "0"])
    llm = llamay.load(smollm_path)
    ids = prompt_ids(template_for(llm.metadata, llm.tokenizer), llm.tokenizer,
                     [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hi"}])
    assert code == 0 and capsys.readouterr().out == "".join(llm.generate(ids, max_tokens=8, temperature=0)) + "\n"


# --- the input rules, without a model ---------------------------------------------------------------------

def test_split_command():
    assert split_command("/set  temperature 0.5 ") == ("/set", "temperature 0.5")
    assert split_command("/bye") == ("/bye", "")


@pytest.mark.parametrize("first, more, want", [
    ("plain", [], "plain"),
    ('"""one line"""', [], "one line"),
    ('"""', ["a", 'b"""'], "\na\nb"),
    ('"""start', ['end"""'], "start\nend"),
    ('""""""', [], ""),
])
def test_multi_line_messages_follow_ollama(first, more, want):
    lines = iter(more)
    assert read_message(first, lambda: next(lines)) == want
    assert next(lines, None) is None  # it read every line it had to and no more


def test_an_unterminated_multi_line_message_ends_at_eof():
    def eof():
        raise EOFError
    with pytest.raises(EOFError):
        read_message('"""open', eof)


@pytest.mark.parametrize("arg, want", [
    ("temperature 0.5", ("temperature", "temperature", 0.5)),
    ("parameter top_k 7", ("top_k", "top_k", 7)),
    ("num_predict -1", ("num_predict", "max_tokens", None)),
    ("num_predict 12", ("num_predict", "max_tokens", 12)),
    ("seed 3", ("seed", "seed", 3)),
    ("repeat_penalty 1.1", ("repeat_penalty", "repeat_penalty", 1.1)),
])
def test_set_parses_values(arg, want):
    assert parse_param(arg) == want


@pytest.mark.parametrize("arg, message", [
    ("temperature -0.1", "temperature: -0.1 is out of range: it must be >= 0.0"),
    ("top_p 1.5", "top_p: 1.5 is out of range: it must be in [0.0, 1.0]"),
    ("min_p x", "min_p: 'x' is not a number"),
    ("repeat_penalty 0", "repeat_penalty: 0 is out of range: it must be > 0.0"),
    ("seed -2", "seed: -2 is out of range"),
    ("num_predict 0", "num_predict: 0 would generate nothing"),
    ("top_k", "usage: /set top_k VALUE"),
    ("top_k 1 2", "usage: /set top_k VALUE"),
    ("warmth 3", "unknown parameter 'warmth': one of temperature, top_k"),
    ("parameter", "no parameter given"),
])
def test_set_refuses_bad_values_in_one_line(arg, message):
    with pytest.raises(ValueError) as e:
        parse_param(arg)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["s1", "my-chat_2.v3", "A" * 64])
def test_chat_names_that_are_one_file_name(name):
    assert check_name(name, "/save") == name


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "a..b", "A" * 65, "sp ace", "-x"])
def test_chat_names_that_could_escape_or_hide_are_refused(name):
    with pytest.raises(ValueError, match="is not a chat name"):
        check_name(name, "/save")


def test_a_missing_chat_name_is_a_usage_line():
    with pytest.raises(ValueError, match="^usage: /load NAME$"):
        check_name("", "/load")
