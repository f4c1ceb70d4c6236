"""llama.cpp's own server tests against `llamay serve`: runs each file of the suite (tests/llamacpp_server_suite.py
says which and fetches it from the llama-cpp-python sdist into the test cache) and prints, per file, the tests
that pass, those excluded because they expect the suite's own model (its text, or a file with no stand-in here),
those kept different on purpose (docs/LLAMA_SERVER.md), those open (not fixed yet) and those that fail unlisted. Slow (every test starts a server): minutes per file.

    python scripts/llamacpp_server_suite.py [FILE...] [--save DIR] [--load DIR] [--list]

--save DIR keeps each file's outcomes as DIR/FILE.json; --load DIR prints the table from them without running;
--list prints the node ids of each failing, excluded and kept test with its reason."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import llamacpp_server_suite as suite  # noqa: E402

CACHE = Path(os.environ.get("LLAMAY_TEST_CACHE", Path.home() / ".cache" / "llamay-tests"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", default=list(suite.FILES), help="suite files without test_ and .py")
    p.add_argument("--save", type=Path, help="write each file's outcomes here")
    p.add_argument("--load", type=Path, help="read outcomes from here instead of running")
    p.add_argument("--list", action="store_true", help="list the tests that do not pass, with reasons")
    args = p.parse_args()
    rows, details = [], []
    for name in args.files:
        if args.load:
            outcomes = json.loads((args.load / f"{name}.json").read_text())
        else:
            outcomes = suite.run(CACHE, name)
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{name}.json").write_text(json.dumps(outcomes, indent=1))
        kinds = suite.classify(outcomes)
        rows.append((name, kinds))
        for kind, table in (("fail", None), ("open", suite.OPEN), ("excluded", suite.EXCLUDED), ("kept", suite.KEPT)):
            details += [(kind, n, suite.reason(n, table) if table else "") for n in kinds[kind]]
    print_table(rows)
    if args.list:
        for kind, nodeid, why in details:
            print(f"{kind:8} {nodeid}  {why}")
    return 0


def print_table(rows):
    head = ("file", "tests", "pass", "suite's model", "kept", "open", "fail", "skipped", "pass of the rest")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    totals = {k: 0 for k in ("pass", "excluded", "kept", "open", "fail", "skipped")}
    for name, kinds in rows + [("total", None)]:
        counts = totals if kinds is None else {k: len(v) for k, v in kinds.items()}
        if kinds is not None:
            for k in totals:
                totals[k] += counts[k]
        judged = counts["pass"] + counts["kept"] + counts["open"] + counts["fail"]
        share = f"{100 * counts['pass'] / judged:.0f}%" if judged else "-"
        cells = (name, sum(counts.values()), counts["pass"], counts["excluded"], counts["kept"], counts["open"],
                 counts["fail"], counts["skipped"], share)
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
