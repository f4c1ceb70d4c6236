"""KV state: the page pool (arrays) and, later, page allocation, radix prefix tree, forks, snapshots."""
from .pool import PagePool

__all__ = ["PagePool"]
