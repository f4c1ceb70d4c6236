"""The KV element types the C kernels store and read, by name -> code of csrc/kvtypes.h (a leaf module: it
loads no kernels)."""
KV_CODES = {"f32": 0, "f16": 1, "q8": 2}


def kv_codes(kv) -> int:
    """A KV type's (kv/pool.py KVType) key and value codes as the attention kernel takes them: k | v << 8."""
    return KV_CODES[kv.k] | KV_CODES[kv.v] << 8
