"""Runs llama.cpp's convert_hf_to_gguf.py on several HF model directories in one process (torch imports once).
argv: TREE OUTTYPE (MODEL_DIR OUT_FILE)...

One lookup is pinned: the converter names a BPE tokenizer's pre-tokenizer by hashing how it splits a fixed
text, and a tiny made-up tokenizer matches no known model, so the name is 'default' (the tokenizer is not
under test; the architecture is). Every file is named 'tiny': llama.cpp sets some token attributes by
model name (a name with 'phi3' in it expects Phi-3's own special tokens). Qwen3-Next's and Qwen3.5's
converters are told there is no multi-token-prediction block (--no-mtp): HF builds none for a tiny model,
and without the flag the converter asserts that the checkpoint has one."""
import sys

tree, outtype, *pairs = sys.argv[1:]
sys.path.insert(0, tree)
import convert_hf_to_gguf  # noqa: E402  (puts the tree's gguf-py first on sys.path)
from conversion.base import TextModel  # noqa: E402
from conversion.qwen import _QwenMtpMixin  # noqa: E402

TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
_QwenMtpMixin.no_mtp = True
for model_dir, out in zip(pairs[::2], pairs[1::2]):
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", out, "--outtype", outtype, "--model-name", "tiny"]
    convert_hf_to_gguf.main()
