"""Tokenizers of the real model files against llama.cpp's own outputs (fixtures/llamacpp/*/tokenize.json),
the BERT ids of the MiniLM embedding fixtures, and metadata handling (flags, specials, refusals)."""
import json

import numpy as np
import pytest

from llamay.gguf import GGUFReader
from llamay.tokenizer import Tokenizer


def load_tokenize_json(fixtures_dir, folder: str) -> dict:
    return json.loads((fixtures_dir / "llamacpp" / folder / "tokenize.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def smollm_tok(smollm_path):
    return Tokenizer.from_gguf(GGUFReader(smollm_path))


@pytest.fixture(scope="module")
def gemma_tok(gemma_path):
    return Tokenizer.from_gguf(GGUFReader(gemma_path).metadata)


def _id_variants(entry: dict):
    """("ids_add_bos_true_special_false", add_special, parse_special, ids) for every variant given."""
    for key, ids in entry.items():
        if key.startswith("ids_add_bos_"):
            parts = key.split("_")
            yield key, parts[3] == "true", parts[5] == "true", ids


def _check_strings(tok: Tokenizer, data: dict) -> int:
    n_checked = 0
    for entry in data["strings"]:
        text = bytes.fromhex(entry["utf8_hex"]).decode("utf-8")
        for key, add_special, parse_special, ids in _id_variants(entry):
            assert tok.encode(text, add_special=add_special, parse_special=parse_special) == ids, (key, text)
            n_checked += 1
    return n_checked


@pytest.mark.model
def test_smollm_tokenize_matches_llamacpp(smollm_tok, fixtures_dir):
    data = load_tokenize_json(fixtures_dir, "smollm2-135m")
    assert smollm_tok.n_vocab == data["meta"]["n_vocab"]
    assert (smollm_tok.bos_id, smollm_tok.eos_id) == (data["meta"]["token_bos"], data["meta"]["token_eos"])
    assert smollm_tok.add_bos_token is data["meta"]["vocab_get_add_bos"]
    assert smollm_tok.add_eos_token is data["meta"]["vocab_get_add_eos"]
    assert _check_strings(smollm_tok, data) == 4 * data["n_strings"]


@pytest.mark.model
def test_gemma_tokenize_matches_llamacpp(gemma_tok, fixtures_dir):
    data = load_tokenize_json(fixtures_dir, "gemma3-270m")
    assert gemma_tok.bos_id == data["token_bos"] and gemma_tok.add_bos_token is data["vocab_get_add_bos"]
    assert _check_strings(gemma_tok, data) == 3 * data["n_strings"]


@pytest.mark.model
@pytest.mark.parametrize("folder", ["smollm2-135m", "gemma3-270m"])
def test_pieces_and_detokenize_match_llamacpp(folder, fixtures_dir, request):
    tok = request.getfixturevalue("smollm_tok" if folder.startswith("smollm") else "gemma_tok")
    data = load_tokenize_json(fixtures_dir, folder)
    for entry in data["strings"]:
        for key, pieces in entry.items():
            if not key.startswith("pieces"):
                continue
            ids = entry["ids_add_bos_false_special_" + ("false" if key.endswith("special_false") else "true")]
            assert [tok.piece(t).decode("utf-8", "backslashreplace") for t in ids] == pieces, key
        for special in ("true", "false"):
            ids = entry[f"ids_add_bos_false_special_{special}"]
            assert (tok.decode(ids) == entry["text"]) is entry[f"detok_roundtrip_equal_special_{special}"]


@pytest.mark.model
def test_minilm_wordpiece_ids_match_llamacpp(fixtures_dir):
    data = json.loads((fixtures_dir / "llamacpp" / "minilm-l6-v2" / "embeddings.json").read_text("utf-8"))
    tok = Tokenizer.from_gguf(GGUFReader(fixtures_dir / "models" / "all-minilm-l6-v2-f16.gguf"))
    for entry in data["sentences"]:  # llm.tokenize(text, add_bos=True, special=False): [CLS] ... [SEP]
        assert tok.encode(entry["text"], add_special=True) == entry["token_ids"], entry["text"]


@pytest.mark.model
def test_smollm_special_tokens_and_eog(smollm_tok):
    t2i = smollm_tok.vocab.token_to_id
    im_start, im_end, eot = t2i["<|im_start|>"], t2i["<|im_end|>"], t2i["<|endoftext|>"]
    assert {im_end, eot} <= smollm_tok.eog_ids and smollm_tok.eos_id in smollm_tok.eog_ids
    assert im_start not in smollm_tok.eog_ids
    assert smollm_tok.is_special(im_start) and not smollm_tok.is_special(t2i["Hello"])
    assert smollm_tok.encode("<|im_start|>user", parse_special=True)[0] == im_start
    assert im_start not in smollm_tok.encode("<|im_start|>user", parse_special=False)


@pytest.mark.model
def test_gemma_special_tokens_and_eog(gemma_tok):
    t2i = gemma_tok.vocab.token_to_id
    assert {t2i["<end_of_turn>"], t2i["<eos>"]} <= gemma_tok.eog_ids
    assert gemma_tok.eot_id == t2i["<end_of_turn>"]
    ids = gemma_tok.encode("<start_of_turn>user\nHi<end_of_turn>", add_special=False, parse_special=True)
    assert ids[0] == t2i["<start_of_turn>"] and ids[-1] == t2i["<end_of_turn>"]
    assert gemma_tok.decode(ids) == "<start_of_turn>user\nHi<end_of_turn>"
    assert gemma_tok.add_space_prefix is False and len(gemma_tok.scores) == gemma_tok.n_vocab == 262144


def _minimal_metadata(model: str) -> dict:
    return {"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": ["a", "b"],
            "tokenizer.ggml.token_type": np.array([1, 1], dtype=np.int32)}


@pytest.mark.parametrize("model", ["rwkv", "t5", "none", "plamo2"])
def test_unsupported_tokenizer_models_are_refused_by_name(model):
    with pytest.raises(ValueError, match=repr(model)):
        Tokenizer.from_gguf(_minimal_metadata(model))


def test_unknown_pre_tokenizer_is_refused_by_name():
    md = _minimal_metadata("gpt2") | {"tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.pre": "no-such-pre"}
    with pytest.raises(ValueError, match="no-such-pre"):
        Tokenizer.from_gguf(md)


def test_default_flags_per_model_type():
    """llama.cpp's defaults when the add_* keys are absent: SPM adds BOS and a space prefix, BPE neither."""
    spm = Tokenizer.from_gguf({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>"]})
    assert (spm.add_bos_token, spm.add_eos_token, spm.add_space_prefix) == (True, False, True)
    assert (spm.bos_id, spm.eos_id) == (1, 2)
    bpe = Tokenizer.from_gguf(_minimal_metadata("gpt2") | {"tokenizer.ggml.merges": ["a b"]})
    assert (bpe.add_bos_token, bpe.add_space_prefix) == (False, False)


def test_special_matcher_paths_agree(fixtures_dir):
    """Substring search and trie walk find the same special tokens (two execution paths)."""
    tok = Tokenizer.from_gguf(GGUFReader(fixtures_dir / "vocab" / "ggml-vocab-phi-3.gguf"))
    text = "<|user|>\nHi there</s>  <|end|>\n<|assistant|> ok <s> x <|endoftext|>" * 3
    for parse_special in (False, True):
        trie = tok.special._trie(parse_special)
        assert trie.present(text) == trie._walk(text) == {tid for t, tid in trie.texts.items() if t in text}
    ids = tok.encode(text, add_special=False, parse_special=True)
    t2i = tok.vocab.token_to_id
    assert ids.count(t2i["<|user|>"]) == 3 and ids.count(t2i["<|assistant|>"]) == 3


def test_vocab_fields_exposed(fixtures_dir):
    tok = Tokenizer.from_gguf(GGUFReader(fixtures_dir / "vocab" / "ggml-vocab-bert-bge.gguf").metadata)
    md = GGUFReader(fixtures_dir / "vocab" / "ggml-vocab-bert-bge.gguf").metadata
    assert tok.tokens == md["tokenizer.ggml.tokens"] and tok.pre == md["tokenizer.ggml.pre"]
    assert (tok.unk_id, tok.sep_id, tok.pad_id, tok.cls_id, tok.mask_id) == (
        md["tokenizer.ggml.unknown_token_id"], md["tokenizer.ggml.seperator_token_id"],
        md["tokenizer.ggml.padding_token_id"], md["tokenizer.ggml.cls_token_id"],
        md["tokenizer.ggml.mask_token_id"])
    assert tok.token_type == md["tokenizer.ggml.token_type"].tolist()
