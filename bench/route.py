"""`llamay route` against round-robin over the same servers: agents with their own long system prompts take
turns (interleaved), and each request's prompt tokens found in its server's prefix cache and its time to
first token (one generated token, non-streamed) are summed. Prefix routing keeps an agent on the server that
holds its pages; round-robin sends every other turn to a server that never saw that agent.

Servers are threads of this process (one thread each, no disk or shared tier: memory only, so the routing
is all that differs). Every policy starts with fresh servers.

usage: python bench/route.py [MODEL.gguf] [--servers 2] [--agents 5] [--turns 4] [--system-words 300]"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import machine  # noqa: E402
from models import smollm_path  # noqa: E402
from server_thread import AppThread, ServerThread  # noqa: E402

WORDS = ("river stone lamp harbor meadow copper lantern window forest garden signal bridge valley engine "
         "thunder market silver orchard compass tower").split()


def system_prompt(agent: int, words: int) -> str:
    pick = itertools.islice(itertools.cycle(WORDS[agent % len(WORDS):] + WORDS[:agent % len(WORDS)]), words)
    return f"You are agent {agent}. Your notes: " + " ".join(pick)


def run(policy: str, model: str, args) -> dict:
    servers = [ServerThread(["-m", model, "--threads", "1", "-c", "4096", "--cache-disk", "0", "-q"])
               for _ in range(args.servers)]
    front = None
    if policy == "route":
        from llamay.route.app import create_app
        front = AppThread(create_app([s.url for s in servers]))
    rr = itertools.cycle(servers)
    history = {a: [{"role": "system", "content": system_prompt(a, args.system_words)}] for a in range(args.agents)}
    cached = prompt = 0
    ttfts = []
    try:
        with httpx.Client(timeout=600) as client:
            for turn in range(args.turns):
                for agent in range(args.agents):
                    history[agent].append({"role": "user", "content": f"Turn {turn}: what next?"})
                    url = front.url if front else next(rr).url
                    t = time.perf_counter()
                    r = client.post(url + "/v1/chat/completions", json={"messages": history[agent], "max_tokens": 1,
                                                                        "temperature": 0})
                    ttfts.append(time.perf_counter() - t)
                    r.raise_for_status()
                    usage = r.json()["usage"]
                    prompt += usage["prompt_tokens"]
                    cached += usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
                    history[agent].append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
    finally:
        if front:
            front.stop()
        for s in servers:
            s.stop()
    return {"cached": cached, "prompt": prompt, "mean_ttft": statistics.mean(ttfts), "total": sum(ttfts)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--agents", type=int, default=5)  # odd: round-robin does not stick by chance
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-words", type=int, default=300)
    args = ap.parse_args()
    model = args.model or str(smollm_path())
    print(machine.describe(1))
    print(f"{Path(model).name}: {args.servers} servers, {args.agents} agents x {args.turns} turns, "
          f"system prompts of {args.system_words} words\n")
    print(f"{'policy':<12} {'cached/prompt tokens':>22} {'hit rate':>9} {'mean TTFT':>10} {'total':>8}")
    results = {}
    for policy in ("round-robin", "route"):
        r = results[policy] = run(policy, model, args)
        print(f"{policy:<12} {r['cached']:>10} / {r['prompt']:<10} {r['cached'] / r['prompt']:>8.1%} "
              f"{r['mean_ttft'] * 1000:>8.0f}ms {r['total']:>7.2f}s")
    print(f"\nroute vs round-robin: time to first token {results['round-robin']['mean_ttft'] / results['route']['mean_ttft']:.2f}x "
          f"faster on average")
    print(f"after: {machine.load()}")


if __name__ == "__main__":
    main()
