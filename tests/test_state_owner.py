"""One owner for a context's state, checked on the source: only engine/context_store.py may change KV state
(call a mutating method of KVState, hold one, or reach the store's private state), and nothing outside the
engine reaches the store or hands functions to the scheduler: the server goes through engine/session.py."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "llamay"
OWNER = "engine/context_store.py"
PRIVATE = {"_kv", "_ctxs"}  # the store's state: its KVState and its records
HOLDERS = {"_kv", "state", "kv_state"}  # names a KVState was reached under before it had one owner
ENGINE_ONLY = {"context_store", "_store"}  # the LLM's store: engine modules call its verbs


def mutating_methods() -> set[str]:
    """KVState's methods that change it: those that call self._mutating(), and the plan they apply."""
    tree = ast.parse((ROOT / "kv" / "state.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KVState")
    out = {"plan_append"}
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "_mutating"
                for c in ast.walk(fn)):
            out.add(fn.name)
    return out


MUTATING = mutating_methods()


def _last_name(node) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def violations(rel: str, source: str) -> list[str]:
    """What a module other than the owner does that only the owner may do."""
    if rel == OWNER or rel.startswith("kv/"):
        return []
    out = []
    for node in ast.walk(ast.parse(source)):
        line = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Name) and node.id == "KVState":
            out.append(f"{line} names KVState")
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] == "KVState":
            out.append(f"{line} imports KVState")
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            out.append(f"{line} reaches the store's {node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATING
              and _last_name(node.func.value) in HOLDERS):
            out.append(f"{line} calls KVState.{node.func.attr}")
        if not rel.startswith("engine/") and isinstance(node, ast.Attribute) and (
                node.attr in ENGINE_ONLY or node.attr in ("call", "do") and _last_name(node.value) == "scheduler"):
            out.append(f"{line} reaches the engine's {node.attr} (use the Session)")
    return out


def test_only_the_store_changes_context_state():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        bad += violations(path.relative_to(ROOT).as_posix(), path.read_text())
    assert not bad, bad


def test_the_store_is_the_one_caller_of_every_mutating_method():
    calls = {n.func.attr for n in ast.walk(ast.parse((ROOT / OWNER).read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATING}
    assert MUTATING >= {"create", "fork", "free", "truncate", "cache", "pin", "unpin", "restore", "apply", "commit"}
    assert calls == MUTATING  # each is used, and (the test above) only here


def test_the_checker_sees_each_way_around_the_store():
    bad = violations("server/x.py", "from ..kv import KVState\n"
                                    "def f(llm, runner, store):\n"
                                    "    runner.state.truncate(1, 2)\n"
                                    "    store._kv.free(1)\n"
                                    "    store._ctxs[1].pending = []\n"
                                    "    llm.context_store.fork(1, 2)\n"
                                    "    llm.scheduler.call(lambda s: s.free(1))\n")
    assert len(bad) == 7, bad
    assert violations("engine/x.py", "def f(llm):\n    llm.context_store.fork(1, 2)\n") == []
    assert violations(OWNER, "def f(self):\n    self._kv.truncate(1, 2)\n") == []
