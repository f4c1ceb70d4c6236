"""llama.cpp's own converters (convert_hf_to_gguf.py, convert_lora_to_gguf.py, their conversion/ and gguf-py/) and its
server's test suite (tools/server/tests/, with the chat templates it reads from models/templates/), taken from
the llama.cpp tree inside the llama-cpp-python sdist on PyPI: downloaded once into the test cache, run in a
subprocess, nothing of it copied into the project. LLAMAY_LLAMACPP_TREE points at an unpacked tree instead."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.3.36"  # llama-cpp-python; its vendor/llama.cpp is the llama.cpp under test
_WANTED = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/", "tools/server/tests/",
           "models/templates/")
_CHECK = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "tools/server/tests/utils.py")  # a whole tree has these
_HERE = Path(__file__).resolve().parent


def tree(cache: Path) -> Path:
    """A directory holding llama.cpp's _WANTED files."""
    if os.environ.get("LLAMAY_LLAMACPP_TREE"):
        return Path(os.environ["LLAMAY_LLAMACPP_TREE"])
    root = cache / f"llama.cpp-from-llama-cpp-python-{VERSION}"
    if all((root / f).exists() for f in _CHECK):
        return root
    shutil.rmtree(root, ignore_errors=True)  # a cache from before a file was wanted
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={VERSION}", "-d", tmp], check=True)
        prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
        out = Path(tmp) / "tree"
        with tarfile.open(next(Path(tmp).glob("*.tar.gz"))) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)
                       and m.name[len(prefix):].startswith(_WANTED) and (m.isfile() or m.isdir())]
            for m in members:
                m.name = m.name[len(prefix):]
            tar.extractall(out, members=members, filter="data")
        if not (out / "convert_hf_to_gguf.py").exists():
            raise RuntimeError(f"llama-cpp-python {VERSION}'s sdist has no vendor/llama.cpp/convert_hf_to_gguf.py")
        shutil.move(out, root)  # whole or not at all: the check above is on the finished tree
    return root


def convert(cache: Path, jobs: list[tuple[Path, Path]], outtype: str = "f32"):
    """Converts each (HF model directory, output .gguf) with llama.cpp's converter, all in one process."""
    args = [str(a) for job in jobs for a in job]
    done = subprocess.run([sys.executable, str(_HERE / "llamacpp_convert.py"), str(tree(cache)), outtype, *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"convert_hf_to_gguf.py failed:\n{done.stderr[-4000:]}")


def convert_lora(cache: Path, adapter: Path, base: Path, out: Path, outtype: str = "f32"):
    """A PEFT LoRA directory -> GGUF adapter, by llama.cpp's convert_lora_to_gguf.py (base: the HF model
    directory it was trained on; only its config is read)."""
    done = subprocess.run([sys.executable, str(tree(cache) / "convert_lora_to_gguf.py"), str(adapter), "--base",
                           str(base), "--outfile", str(out), "--outtype", outtype], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"convert_lora_to_gguf.py failed:\n{done.stderr[-4000:]}")
