"""Request fuzzer for `llamay serve`: seeded mutations of valid bodies for every API's routes, sent to a
server in this process on 127.0.0.1. Every answer must be a 2xx or a 4xx (503/529 only for overload), in
JSON; the server must stay up and, at the end, hold no page beyond its named contexts.

    python scripts/fuzz_requests.py --cases 20000 --seed 1 [--model PATH] [--show 5]

A case is case i of seed s: random.Random(f"{s}:{i}") picks a seed request and 1-3 edits (a value
replaced by an edge value of another type, a key deleted, a list emptied or grown, a string made huge or
given odd Unicode), so `--seed s --case i` replays it alone."""
from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

EDGES = [None, "", "x" * 5000, "\u0000", "\ud7ff\ue000\U0010ffff", "<|im_start|>", -1, 0, 1, 2**31, 2**63,
         -2**63, 10**30, 1e308, -1e308, 0.5, True, False, [], {}, [None], {"": None}, [[[[[]]]]], "NaN"]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def seeds(model: str) -> list[tuple[str, str, dict]]:
    m = model
    return [
        ("POST", "/v1/chat/completions", {"model": m, "messages": MESSAGES, "max_tokens": 4, "temperature": 0,
                                          "logprobs": True, "top_logprobs": 2, "stop": ["\n"], "seed": 1}),
        ("POST", "/v1/chat/completions", {"model": m, "messages": MESSAGES, "max_tokens": 8, "tools": TOOLS,
                                          "tool_choice": "required", "stream": True}),
        ("POST", "/v1/chat/completions", {"model": m, "messages": MESSAGES, "max_tokens": 8, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}),
        ("POST", "/v1/completions", {"model": m, "prompt": "Hello", "max_tokens": 4, "n": 2, "echo": True,
                                     "logit_bias": {"42": 5}, "logprobs": 2}),
        ("POST", "/v1/responses", {"model": m, "input": "Say hi", "max_output_tokens": 4, "tools": [
            {"type": "function", "name": "f", "parameters": SCHEMA}]}),
        ("POST", "/v1/messages", {"model": m, "max_tokens": 4, "system": "Be brief.", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Say hi"}]}], "tools": [
            {"name": "f", "input_schema": SCHEMA}], "stream": True}),
        ("POST", "/v1/messages/count_tokens", {"model": m, "messages": [{"role": "user", "content": "hi"}]}),
        ("POST", "/api/generate", {"model": m, "prompt": "Hello", "stream": False, "options": {
            "num_predict": 4, "temperature": 0, "top_k": 5}, "format": SCHEMA}),
        ("POST", "/api/chat", {"model": m, "messages": MESSAGES, "stream": True, "options": {"num_predict": 4},
                               "tools": TOOLS, "keep_alive": 60}),
        ("POST", "/api/show", {"model": m, "verbose": True}),
        ("POST", "/api/embed", {"model": m, "input": ["a", "b"]}),
        ("POST", "/v1/embeddings", {"model": m, "input": "hello", "encoding_format": "base64"}),
        ("POST", "/tokenize", {"content": "Hello world", "with_pieces": True}),
        ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
        ("POST", "/v1/contexts", {"model": m, "prompt": "The lighthouse keeper"}),
        ("POST", "/v1/contexts", {"model": m, "messages": MESSAGES, "tools": TOOLS}),
    ]


def _paths(node, prefix=()):
    """Every (path, value) in a JSON tree, the root included."""
    yield prefix, node
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield from _paths(child, prefix + (key,))


def _set(root, path, value):
    if not path:
        return value
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return root


def _delete(root, path):
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]


def mutate(body: dict, rng: random.Random) -> dict:
    body = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        path, value = rng.choice(list(_paths(body)))
        op = rng.random()
        if path and op < 0.2:
            _delete(body, path)
        elif isinstance(value, list) and op < 0.35:
            _set(body, path, value * rng.choice([0, 2, 50]))
        elif isinstance(value, str) and op < 0.5:
            _set(body, path, value * rng.choice([0, 1000]) + rng.choice(["", "\u202e", "\ud83d\ude00", "\\", '"']))
        else:
            body = _set(body, path, copy.deepcopy(rng.choice(EDGES)))
        if not isinstance(body, dict):
            return {"model": body}
    return body


def run_case(client: httpx.Client, model: str, seed: int, i: int) -> tuple[int, str, dict]:
    rng = random.Random(f"{seed}:{i}")
    method, path, body = rng.choice(seeds(model))
    body = mutate(body, rng)
    if isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 64:
        body["max_tokens"] = 64  # bounded time per case; the value itself is not what is fuzzed here
    raw = json.dumps(body).encode()  # ASCII escapes: surrogates (paired or lone) reach the server as JSON has them
    with client.stream(method, path, content=raw, headers={"content-type": "application/json"}) as r:
        text = r.read().decode("utf-8", "replace")
    return r.status_code, f"{method} {path}", {"body": body, "answer": text[:500]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start", type=int, default=0, help="first case number")
    p.add_argument("--case", type=int, default=None, help="replay this one case")
    p.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    p.add_argument("--show", type=int, default=5, help="failing cases printed")
    p.add_argument("--progress", type=int, default=0, help="print the counts every N cases")
    args = p.parse_args(argv)
    from llamay.defaults import default_model_path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from server_thread import ServerThread
    path = args.model or str(default_model_path())
    if args.case is None:  # tracebacks of 5xx cases go to the summary, not the terminal
        import logging
        logging.getLogger("llamay.server").setLevel(logging.CRITICAL)
    server = ServerThread(["-m", path, "--threads", "2", "-c", "512", "--max-contexts", "16", "--queue", "64"])
    counts, bad = Counter(), []
    model = server.registry.resolve(None)
    cases = [args.case] if args.case is not None else range(args.start, args.start + args.cases)
    t0 = time.monotonic()
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            for i in cases:
                try:
                    status, route, detail = run_case(client, model, args.seed, i)
                except httpx.TimeoutException:  # a slow answer is no failure by itself; say which case
                    counts["timeout"] += 1
                    print(f"case {i}: no answer in {client.timeout.read} s", file=sys.stderr, flush=True)
                    continue
                counts[status // 100 * 100 if status not in (503, 529) else status] += 1
                if status >= 500 and status not in (503, 529):
                    bad.append((i, status, route, detail))
                    print(f"case {i}: {status} {route}: {detail['answer'][:300]}", file=sys.stderr, flush=True)
                if args.progress and i % args.progress == 0:
                    print(f"case {i}: {dict(counts)}", file=sys.stderr, flush=True)
                if i % 200 == 0:
                    for c in client.get("/v1/contexts").json()["data"]:
                        client.delete(f"/v1/contexts/{c['id']}")
            for c in client.get("/v1/contexts").json()["data"]:
                client.delete(f"/v1/contexts/{c['id']}")
            alive = client.get("/health").status_code == 200
        held = server.check_pages()
    finally:
        server.stop()
    print(json.dumps({"cases": len(cases), "seconds": round(time.monotonic() - t0, 1),
                      "status": {str(k): v for k, v in sorted(counts.items(), key=str)}, "5xx": len(bad),
                      "alive": alive, "pages_held_after": held}))
    kinds = Counter((route, detail["answer"][:160]) for _, _, route, detail in bad)
    for (route, answer), n in kinds.most_common():
        print(f"{n:6d}  {route}  {answer}", file=sys.stderr)
    for i, status, route, detail in bad[:args.show]:
        print(f"case {i}: {status} {route}: {json.dumps(detail, ensure_ascii=True)[:1500]}", file=sys.stderr)
    return 1 if bad or not alive or held else 0


if __name__ == "__main__":
    sys.exit(main())
