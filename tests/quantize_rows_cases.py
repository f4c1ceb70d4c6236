"""The input rows of tests/test_quantize_rows.py, shared with scripts/ggml_quantize_rows.py (which records
ggml's quantization of each in tests/fixtures/quantize_rows.json): a case is a small dict (name, kind, seed,
nrows, n_per_row) and case_input(case) regenerates its float32 rows exactly. Every case is also quantized
with each importance matrix of IMATRICES (a dict: name, kind, seed), imatrix_input(im, n_per_row)
regenerating its float32 [n_per_row] values."""
import numpy as np

TYPES = ("F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

CASES = [
    {"name": "normal-256", "kind": "normal", "seed": 1, "nrows": 4, "n_per_row": 256},
    {"name": "normal-512", "kind": "normal", "seed": 2, "nrows": 3, "n_per_row": 512},
    {"name": "uniform-512", "kind": "uniform", "seed": 3, "nrows": 3, "n_per_row": 512},
    {"name": "sparse-256", "kind": "sparse", "seed": 4, "nrows": 4, "n_per_row": 256},
    {"name": "heavy-512", "kind": "heavy", "seed": 5, "nrows": 2, "n_per_row": 512},
    {"name": "ints-256", "kind": "ints", "seed": 6, "nrows": 2, "n_per_row": 256},
    {"name": "special-256", "kind": "special", "seed": 7, "nrows": 5, "n_per_row": 256},
    {"name": "magnitudes-256", "kind": "magnitudes", "seed": 8, "nrows": 6, "n_per_row": 256},
]

# special: one row per pattern (zeros, all equal, all equal negative, positive only, alternating blocks)
# magnitudes: one row per scale: fp16 overflow (1e30: inf scales, x^2 -> inf), near the fp16 maximum,
# fp16 subnormal scales, below GROUP_MAX_EPS, below the fp16 range, and float32 subnormals
MAGNITUDES = (1e30, 3e4, 1e-6, 1e-16, 1e-30, 1e-40)


def case_input(case: dict) -> np.ndarray:
    """float32 [nrows, n_per_row], C-contiguous, the same for the same case on every run."""
    rng = np.random.default_rng(case["seed"])
    shape = (case["nrows"], case["n_per_row"])
    kind = case["kind"]
    if kind == "normal":
        x = rng.standard_normal(shape)
    elif kind == "uniform":  # offset: the affine formats' mins matter
        x = rng.uniform(-0.5, 1.5, shape)
    elif kind == "sparse":  # ~70% exact zeros, some whole sub-blocks among them
        x = rng.standard_normal(shape) * (rng.random(shape) < 0.3)
        x[:, 32:64] = 0
    elif kind == "heavy":  # Student t(2): outliers dominate block scales
        x = rng.standard_t(2, shape)
    elif kind == "ints":  # exact halves after scaling: rounding ties
        x = rng.integers(-8, 8, shape).astype(np.float64) / 2
    elif kind == "special":
        x = np.empty(shape)
        n = shape[1]
        x[0] = 0.0
        x[1] = 0.37
        x[2] = -2.5
        x[3] = rng.uniform(0.5, 2.0, n)
        x[4] = np.where(np.arange(n) // 16 % 2, rng.standard_normal(n), 0.0)
    elif kind == "magnitudes":
        x = rng.standard_normal(shape) * np.array(MAGNITUDES[:shape[0]])[:, None]
    else:
        raise ValueError(f"unknown case kind {kind!r}")
    return np.ascontiguousarray(x, dtype=np.float32)


# positive: log-normal, as mean squared activations look; zeros: ~40% exact zeros plus a zero 32-block
# (columns 32..63: whole Q4_0 blocks and Q2_K/Q3_K/Q6_K groups of 16 weigh nothing) and a zero half group
# (72..79); range: 10^U(-24, 24), weights from near nothing to overflowing products with the rows
IMATRICES = [
    {"name": "positive", "kind": "positive", "seed": 101},
    {"name": "zeros", "kind": "zeros", "seed": 102},
    {"name": "range", "kind": "range", "seed": 103},
]


def imatrix_input(im: dict, n_per_row: int) -> np.ndarray:
    """float32 [n_per_row], C-contiguous, finite and >= 0, the same for the same dict and length."""
    rng = np.random.default_rng(im["seed"])
    kind = im["kind"]
    if kind == "positive":
        w = np.exp(rng.standard_normal(n_per_row))
    elif kind == "zeros":
        w = np.exp(rng.standard_normal(n_per_row)) * (rng.random(n_per_row) < 0.6)
        w[32:64] = 0
        w[72:80] = 0
    elif kind == "range":
        w = 10.0 ** rng.uniform(-24, 24, n_per_row)
    else:
        raise ValueError(f"unknown imatrix kind {kind!r}")
    return np.ascontiguousarray(w, dtype=np.float32)
