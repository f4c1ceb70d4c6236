"""KV state: the page pool (arrays) and, later, page allocation, radix prefix tree, forks, snapshots."""
from .pool import DEFAULT_KV_TYPE, KV_TYPES, KVType, PagePool, kv_type

__all__ = ["DEFAULT_KV_TYPE", "KV_TYPES", "KVType", "PagePool", "kv_type"]
