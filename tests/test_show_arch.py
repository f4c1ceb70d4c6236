"""The per-layer plan (models/plan.py) resolved from a spec's parts, and `llamay show --arch` printing it one
line per kind of layer, on tiny files built here (scripts/fuzz_gguf.py) and on specs built from parts."""
import dataclasses
import sys
from pathlib import Path

import pytest

from llamay.cli.main import main
from llamay.gguf import GGUFReader
from llamay.models import UnsupportedModel, arch_spec
from llamay.models.arch import ArchSpec
from llamay.models.parts import FFN, Attention, Norms, Rope

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fuzz_gguf import Geometry, tiny_decoder  # noqa: E402


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Path:
    """A 12-layer gemma3: every 6th layer global, the others sliding over 8 tokens."""
    path = tmp_path_factory.mktemp("show-arch") / "gemma3.gguf"
    path.write_bytes(tiny_decoder(Geometry(arch="gemma3", n_layer=12, window=8)).to_bytes())
    return path


def test_show_arch_prints_one_line_per_kind_of_layer(gemma3, capsys):
    assert main(["show", "--arch", str(gemma3)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "gemma3: 12 layers, embedding 64, vocab 272, context 128"
    assert lines[1].startswith("blocks: rmsnorm pre+post-attn+post-ffn eps 1e-05, q/k norm per head")
    assert lines[2:] == [
        "  10 layers (0-4, 6-10; all but every 6th): attention 4 heads x 16, kv 2, rope neox base 1e4 | swa 8; "
        "ffn gelu_tanh-gated 256",
        "  2 layers (5, 11; every 6th): attention 4 heads x 16, kv 2, rope neox base 1e4 | global; "
        "ffn gelu_tanh-gated 256",
    ]


def test_show_arch_of_a_missing_file_is_one_error(tmp_path, capsys):
    assert main(["show", "--arch", str(tmp_path / "none.gguf")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_the_plan_is_resolved_once_from_the_parts(gemma3):
    spec = arch_spec(GGUFReader(gemma3).metadata)
    assert spec.layers is spec.layers
    assert [p.window for p in spec.layers] == [0 if il % 6 == 5 else 8 for il in range(12)]
    assert {p.mixer for p in spec.layers} == {"attention"}
    assert [p.kv_index for p in spec.layers] == list(range(12))
    assert spec.kv_dims == ((2, 16),) * 12


def _spec(**attn) -> ArchSpec:
    rope = Rope(base=1e4, n_rot=16, neox=True, base_local=100.0, n_rot_local=8)
    return ArchSpec(arch="test", n_layer=6, n_embd=64, n_vocab=10, n_ctx_train=32, norms=Norms(1e-6),
                    attn=Attention(n_head=4, n_head_kv=2, head_dim=32, rope=rope, window=8, global_every=2,
                                   head_dim_local=16, **attn), ffn=FFN(n_ff=64, n_ff_layers=(64,) * 4 + (128,) * 2))


def test_shared_kv_layers_attend_to_the_last_earlier_layer_of_their_kind():
    spec = _spec(n_kv_shared=2)
    p = spec.layers
    assert [x.kv_source for x in p] == [0, 1, 2, 3, 2, 3]
    assert [x.kv_index for x in p] == [0, 1, 2, 3, 2, 3]
    assert spec.kv_layers == (0, 1, 2, 3)
    assert spec.kv_dims == ((2, 16), (2, 32), (2, 16), (2, 32))
    assert [(x.head_dim, x.rope.n_rot, x.rope.base) for x in p[:2]] == [(16, 8, 100.0), (32, 16, 1e4)]
    assert [x.n_ff for x in p] == [64, 64, 64, 64, 128, 128]


def test_a_mixer_not_yet_supported_is_refused():
    spec = dataclasses.replace(_spec(), mixers=("attention",) * 5 + ("gated_delta_net",))
    with pytest.raises(UnsupportedModel, match="gated_delta_net"):
        spec.layers
