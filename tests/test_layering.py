"""The import direction of docs/ARCHITECTURE.md, checked: every llamay import inside src/llamay goes to a
package that table allows for the importing package (a lower one), so no import points back up."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "llamay"
LEAVES = {"files", "env", "events", "defaults", "settings", "gguf", "tokenizer", "grammar", "chat"}
ALLOWED = {name: set() for name in LEAVES} | {
    "toolcall": {"chat", "events"},
    "kernels": {"gguf", "env"},
    "kv": {"files", "settings"},
    "models": {"gguf", "kernels", "kv", "settings"},
    "quantize": {"gguf", "kernels", "files"},
    "engine": {"models", "kernels", "kv", "tokenizer", "grammar", "gguf", "files", "settings", "env", "events"},
    "store": {"files", "gguf", "env", "defaults"},
    "server": {"engine", "chat", "toolcall", "store", "events", "defaults", "settings", "env", "files"},
    "route": {"server", "settings"},
}
TOP = {"cli", "measure", "__init__", "__main__"}  # may import anything below them


def imports_of(path: Path) -> set[str]:
    """The top-level llamay packages a module imports (relative imports resolved)."""
    rel = path.relative_to(ROOT).parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(rel[:-1])[:len(rel) - node.level]
            parts = base + (node.module.split(".") if node.module else [a.name for a in node.names][:1])
            out.add(parts[0].removesuffix(".py"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llamay."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("llamay.")}
    return out


def test_every_import_points_down():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        pkg = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if pkg in TOP:
            continue
        assert pkg in ALLOWED, f"{pkg} is not in docs/ARCHITECTURE.md's table"
        bad += [f"{path.relative_to(ROOT)} imports {t}" for t in imports_of(path) - ALLOWED[pkg] - {pkg}]
    assert not bad, bad


def test_the_checker_sees_a_relative_import_up():
    assert imports_of(ROOT / "toolcall" / "parser.py") == {"chat", "events", "toolcall"}
