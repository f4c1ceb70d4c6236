"""`llamay quantize` writes the same bytes as llama.cpp's llama_model_quantize (the digests its script
recorded, scripts/llamacpp_quantize.py) for every file type, input type and option of quantize_cases.py;
and refuses what it cannot do as llama.cpp does, writing nothing."""
import json
import os
from pathlib import Path

import gguf
import numpy as np
import pytest

import llamay.quantize.run as run_mod
from arch_models import sha256
from conftest import CACHE
from llamay.cli.main import main
from llamay.quantize import QuantizeError, quantize
from quantize_cases import IMATRIX_DIR, IMATRIX_QUANTS, QUANTS, inputs

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "quantize_llamacpp.json").read_text())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quantize")
    got = inputs(tmp, CACHE)
    for name, path in got.items():
        assert sha256(path) == FIXTURE["inputs"][name], f"{name}: not the file llama.cpp quantized"
    return tmp, got


@pytest.mark.parametrize("name, model, ftype, opts", QUANTS, ids=[q[0] for q in QUANTS])
def test_same_bytes_as_llamacpp(files, name, model, ftype, opts):
    tmp, paths = files
    src = paths[model] if "@" not in model else tmp / f"{model.replace('@', '-')}.gguf"
    if not src.exists():  # the case it requantizes, quantized by llamay first
        base, t = model.split("@")
        quantize(paths[base], src, t)
    dst = tmp / f"{name}.gguf"
    quantize(src, dst, ftype, threads=2, **opts)
    want = FIXTURE["cases"][name]
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(dst).tensors}
    assert types == want["types"], {n: (types.get(n), t) for n, t in want["types"].items() if types.get(n) != t}
    assert sha256(dst) == want["output_sha256"]


@pytest.mark.parametrize("name, model, ftype, imatrix", IMATRIX_QUANTS, ids=[q[0] for q in IMATRIX_QUANTS])
def test_same_bytes_as_llamacpp_with_an_imatrix(files, monkeypatch, name, model, ftype, imatrix):
    """llama-quantize --imatrix, run in the imatrix's folder with its bare name (the output records it)."""
    tmp, paths = files
    assert sha256(IMATRIX_DIR / imatrix) == FIXTURE["imatrices"][imatrix]
    monkeypatch.chdir(IMATRIX_DIR)
    dst = tmp / f"{name}.gguf"
    quantize(paths[model], dst, ftype, threads=2, imatrix=imatrix)
    want = FIXTURE["cases"][name]
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(dst).tensors}
    assert types == want["types"], {n: (types.get(n), t) for n, t in want["types"].items() if types.get(n) != t}
    assert sha256(dst) == want["output_sha256"]


def test_imatrix_files_are_read_as_llamacpp_reads_them():
    """The GGUF and legacy .dat forms of one llama-imatrix run give the same rows (the .dat's already
    divided sums, times the call count, over the count again); hostile files are one clear error."""
    from llamay.quantize.imatrix import ImatrixError, load
    g, d = load(IMATRIX_DIR / "llama8.imatrix.gguf"), load(IMATRIX_DIR / "llama8.imatrix.dat")
    assert set(g.entries) == set(d.entries) and len(g.entries) == 8 * 7
    for name in g.entries:
        np.testing.assert_allclose(g.entries[name], d.entries[name], rtol=1e-5)
    assert g.chunk_count == d.chunk_count > 0 and g.datasets and d.datasets
    data = (IMATRIX_DIR / "llama8.imatrix.dat").read_bytes()
    for bad in (data[:3], data[:100], b"\0\0\0\0", (2**30).to_bytes(4, "little") + data[4:40]):
        path = Path(os.environ.get("TMPDIR", "/tmp")) / "bad.imatrix.dat"
        path.write_bytes(bad)
        with pytest.raises(ImatrixError):
            load(path)


def test_refusals_name_the_reason_and_write_nothing(files):
    tmp, paths = files
    dst = tmp / "refused.gguf"
    for ftype, opts, match in [("IQ2_XXS", {}, "importance matrix"), ("IQ4_XS", {}, "i-quants"),
                               ("Q2_K_S", {}, "Q2_K_S needs an importance matrix for its Q2_K tensors"), ("Q7", {}, "unknown type"),
                               ("Q4_0", dict(output_tensor_type="Q9"), "unknown tensor type")]:
        with pytest.raises(QuantizeError, match=match):
            quantize(paths["llama8"], dst, ftype, **opts)
    quantize(paths["llama8"], tmp / "q8.gguf", "Q8_0")
    with pytest.raises(QuantizeError, match="already Q8_0.*--allow-requantize"):
        quantize(tmp / "q8.gguf", dst, "Q4_K_M")
    with pytest.raises(QuantizeError, match="another file"):
        quantize(paths["llama8"], paths["llama8"], "Q4_0")
    (tmp / "text.gguf").write_text("not a model")
    with pytest.raises(QuantizeError, match="not a GGUF file"):
        quantize(tmp / "text.gguf", dst, "Q4_0")
    assert not dst.exists()


def test_a_failure_midway_leaves_no_file(files, monkeypatch):
    tmp, paths = files
    calls = []

    def failing(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(*args, **kw)
    real = run_mod._write_tensor
    monkeypatch.setattr(run_mod, "_write_tensor", failing)
    with pytest.raises(OSError, match="disk full"):
        quantize(paths["llama8"], tmp / "partial.gguf", "Q4_0")
    assert not (tmp / "partial.gguf").exists()
    assert not [p for p in os.listdir(tmp) if p.startswith(".partial")]


def test_cli(files, capsys):
    tmp, paths = files
    assert main(["quantize", str(paths["llama8"]), str(tmp / "cli.gguf"), "q4_k_m", "-t", "1"]) == 0
    err = capsys.readouterr().err
    assert "wrote" in err and "quantizing  100%" in err  # the progress line (plain off a terminal) reaches the end
    assert sha256(tmp / "cli.gguf") == FIXTURE["cases"]["llama8-Q4_K_M"]["output_sha256"]
    assert main(["quantize", str(paths["llama8"]), str(tmp / "x.gguf"), "Q4_0", "--imatrix", str(tmp / "m.dat")]) == 1
    assert "--imatrix" in capsys.readouterr().err
    assert main(["quantize", str(tmp / "nope.gguf"), str(tmp / "x.gguf"), "Q4_0"]) == 1
    assert "no such file" in capsys.readouterr().err
