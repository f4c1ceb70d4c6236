"""A multi-turn agent trace against `llamay serve` and llama.cpp's llama-server on the same GGUF file, one
server at a time on the same machine: a long system prompt, turns, a regenerated answer, an edited earlier
message, a branch, and a restart of the server before the last turn. The conversation is kept as token ids
(llama-server's /tokenize and /completion, which llamay serves too), each answer as the tokens the server
generated, so a turn's prompt extends the last one's tokens exactly. Messages are marked as ChatML marks
them (`<|im_start|>role ... <|im_end|>`, the template of both the Qwen3.5 and the LFM2 files), as a chat
request renders them; --plain writes `User:` / `Assistant:` text with no marker instead. Per turn: time to
first token (a one-token completion of the turn's prompt) and the tokens the server prefilled for it (its
timings' prompt_n), then the turn's answer (greedy) is generated and kept in the conversation. llama-server
runs with its defaults (its context checkpoints included); llamay with its disk tier, so its restart finds
the prefix and the recurrent state on disk.

    python bench/agent_trace.py MODEL.gguf --llama-server PATH [-t 2] [--answer 24] [--plain]"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

SYSTEM = " ".join(f"Rule {i}: the assistant answers tool call number {i} with care and cites the log line {i * 7}."
                  for i in range(40))
USERS = ["Read the build log and list the failing steps.", "Now fix the first failing step.",
         "Explain the fix in one sentence.", "Run the tests again and report."]


class Server:
    def __init__(self, cmd: list[str], port: int):
        self.cmd, self.url = cmd, f"http://127.0.0.1:{port}"
        self.proc = None
        # one kept-alive connection with TCP_NODELAY: httpx writes a request's headers and body apart, and
        # with Nagle's algorithm the body waited for the server's delayed ACK (30-40 ms a request here,
        # whichever server: curl got the same answers in 5 ms)
        nodelay = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        self.client = httpx.Client(transport=nodelay, timeout=3600)

    def start(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.cmd[0]} did not come up")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)

    def post(self, path: str, body: dict) -> dict:
        r = self.client.post(self.url + path, json=body)
        r.raise_for_status()
        return r.json()

    def tokens(self, text: str) -> list[int]:
        return self.post("/tokenize", {"content": text})["tokens"]

    def complete(self, prompt: list[int], n: int) -> tuple[float, dict]:
        t = time.perf_counter()
        out = self.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": True,
                                        "cache_prompt": True})
        return time.perf_counter() - t, out


def trace(server: Server, answer: int, plain: bool) -> list[tuple[str, float, int]]:
    rows = []

    def user(text: str) -> list[int]:
        if plain:
            return server.tokens("\nUser: " + text + "\nAssistant:")
        return server.tokens(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")

    def ask(name: str, prompt: list[int]) -> list[int]:
        ttft, out = server.complete(prompt, 1)
        rows.append((name, ttft, int(out["timings"]["prompt_n"])))
        return server.complete(prompt, answer)[1]["tokens"] + ([] if plain else server.tokens("<|im_end|>\n"))

    system = server.tokens(SYSTEM if plain else f"<|im_start|>system\n{SYSTEM}<|im_end|>\n")
    turn1 = system + user(USERS[0])
    a1 = ask("turn 1 (system + question)", turn1)
    turn2 = turn1 + a1 + user(USERS[1])
    a2 = ask("turn 2", turn2)
    ask("turn 2 regenerated", turn2)
    ask("turn 2 edited", turn1 + a1 + user(USERS[1].replace("first", "second")))
    ask("branch from turn 1", turn1 + a1 + user(USERS[2]))
    ask("turn 1 edited (an earlier message)", system + user(USERS[0].replace("build", "deploy")))
    turn3 = turn2 + a2 + user(USERS[3])
    a3 = ask("turn 3", turn3)
    server.stop()
    server.start()
    ask("turn 4 after a restart", turn3 + a3 + user(USERS[2]))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--llama-server", required=True)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--answer", type=int, default=24)
    p.add_argument("-c", "--ctx-size", type=int, default=4096)
    p.add_argument("--plain", action="store_true", help="messages as plain text, no chat-template markers")
    args = p.parse_args()
    print(machine.describe(args.threads))
    print(f"file: {os.path.basename(args.model)}")
    with tempfile.TemporaryDirectory() as cache:
        servers = {
            "llamay": Server(["llamay", "serve", "-m", args.model, "-t", str(args.threads), "-c", str(args.ctx_size),
                              "--port", "11491", "--cache-disk", "1G", "--cache-dir", cache], 11491),
            "llama-server": Server([args.llama_server, "-m", args.model, "-t", str(args.threads), "-c",
                                    str(args.ctx_size), "--port", "11492"], 11492),
        }
        results = {}
        for name, server in servers.items():
            server.start()
            try:
                results[name] = trace(server, args.answer, args.plain)
            finally:
                server.stop()
    print(f"\n{'turn':38} {'llamay TTFT':>12} {'prefilled':>9} {'llama-server TTFT':>18} {'prefilled':>9} {'speedup':>8}")
    for (turn_name, t_a, n_a), (_, t_b, n_b) in zip(results["llamay"], results["llama-server"]):
        print(f"{turn_name:38} {t_a * 1000:10.0f}ms {n_a:9d} {t_b * 1000:16.0f}ms {n_b:9d} {t_b / t_a:7.1f}x")


if __name__ == "__main__":
    main()
