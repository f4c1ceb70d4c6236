"""The KV element types the C kernels store and read, by name -> code of csrc/kvtypes.h. A leaf module:
the page pool (kv/) imports it without loading the kernels."""
KV_CODES = {"f32": 0, "f16": 1, "q8": 2}
