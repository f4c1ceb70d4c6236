"""Radix tree over token sequences, one node per page: which already-computed pages hold which prefixes.

A node at depth k holds one page whose slots [0, len(key)) are the K/V of tokens key at positions
k*page_size.. given the tokens of its ancestors. len(key) == page_size except for a partial page, which is
always a leaf. Matching is token-granular: full pages are followed by exact key, and the last step takes
the child sharing the longest common prefix with what remains, so a match may end inside a page (the
caller then shares that page and its next write clones it).

The tree never changes refcounts itself: insert and remove report the pages it took or let go of.
Siblings never hold a partial key that is a strict prefix of another sibling's key (the longer one covers
it). Each operation touches one root path with one stamp; eviction takes the leaf with the oldest stamp."""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from .allocator import InvariantError, KVError


class Node:
    __slots__ = ("key", "page", "parent", "children", "stamp", "hits")

    def __init__(self, key: tuple[int, ...], page: int, parent: Node | None, stamp: int):
        self.key, self.page, self.parent, self.stamp = key, page, parent, stamp
        self.hits = 0  # matches that reused this page
        self.children: dict[tuple[int, ...], Node] = {}


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class RadixTree:
    def __init__(self, page_size: int):
        self.page_size = page_size
        self.root = Node((), -1, None, 0)
        self._by_page: dict[int, Node] = {}  # every non-root node, by its page
        self.version = 0  # bumped when nodes are added: a match that failed cannot succeed before it changes

    def __len__(self) -> int:
        return len(self._by_page)

    def match(self, tokens: Sequence[int]) -> tuple[list[Node], int]:
        """(path, n_matched): the nodes whose pages hold tokens[:n_matched], the longest computed prefix."""
        ps, node, path, pos = self.page_size, self.root, [], 0
        while pos < len(tokens):
            chunk = tuple(tokens[pos:pos + ps])
            child = node.children.get(chunk) if len(chunk) == ps else None
            if child is None:
                best, n = self._best_partial(node, chunk)
                if n:
                    path.append(best)
                    pos += n
                break
            path.append(child)
            node, pos = child, pos + ps
        return path, pos

    @staticmethod
    def _best_partial(node: Node, chunk: tuple[int, ...]) -> tuple[Node | None, int]:
        """The child sharing the longest prefix with chunk; ties go to the most recently used."""
        best, best_rank = None, (0, 0)
        for child in node.children.values():
            rank = (_lcp(child.key, chunk), child.stamp)
            if rank > best_rank:
                best, best_rank = child, rank
        return best, best_rank[0]

    def continuation(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that follow tokens in the tree, along the most recently used branch at each fork;
        [] unless the tree holds all of tokens. Pure: no stamp changes."""
        path, n = self.match(tokens)
        if n < len(tokens) or k <= 0:
            return []
        node = path[-1] if path else self.root
        out = list(node.key[n - self.page_size * (len(path) - 1):]) if path else []
        while len(out) < k and node.children:
            node = max(node.children.values(), key=lambda c: c.stamp)
            out += node.key
        return out[:k]

    @staticmethod
    def touch(path: list[Node], stamp: int):
        for node in path:
            node.stamp, node.hits = stamp, node.hits + 1

    def insert(self, tokens: Sequence[int], pages: Sequence[int], stamp: int) -> tuple[list[int], list[int]]:
        """Add tokens (K/V in pages, ceil(len/page_size) of them) -> (pages taken, pages let go).

        Existing nodes keep their own pages; a partial key covered by a longer sibling adds nothing; a new
        node replaces the partial siblings its key extends."""
        ps, node, taken, dropped = self.page_size, self.root, [], []
        for k, page in enumerate(pages):
            key = tuple(tokens[k * ps:(k + 1) * ps])
            child = node.children.get(key)
            if child is None:
                if self._covered(node, key):
                    break
                dropped += self._drop_extended(node, key)
                child = self._add(node, key, page, stamp)
                taken.append(page)
                self.version += 1
            child.stamp = stamp
            node = child
        return taken, dropped

    def _covered(self, node: Node, key: tuple[int, ...]) -> bool:
        n = len(key)
        return n < self.page_size and any(len(c.key) > n and c.key[:n] == key for c in node.children.values())

    def _drop_extended(self, node: Node, key: tuple[int, ...]) -> list[int]:
        stale = [c for c in node.children.values() if len(c.key) < len(key) and key[:len(c.key)] == c.key]
        for child in stale:
            self.remove(child.page)
        return [c.page for c in stale]

    def _add(self, parent: Node, key: tuple[int, ...], page: int, stamp: int) -> Node:
        if page in self._by_page:
            raise KVError(f"page {page} is already in the tree")
        node = Node(key, page, parent, stamp)
        parent.children[key] = node
        self._by_page[page] = node
        return node

    def remove(self, page: int):
        """Drop the leaf holding page (the caller releases the tree's reference)."""
        node = self._by_page[page]
        if node.children:
            raise KVError(f"page {page} is not a leaf")
        del self._by_page[page]
        del node.parent.children[node.key]

    def eviction_order(self, n: int, in_use: Callable[[int], bool]) -> list[int]:
        """Pure: the pages of the next (up to) n evictions, in order. The oldest-stamped leaf not in use goes
        first; a node whose children all went becomes a leaf. Fewer than n: nothing else can go."""
        heap = [(x.stamp, x.page) for x in self._by_page.values() if not x.children and not in_use(x.page)]
        heapq.heapify(heap)
        left: dict[int, int] = {}  # page -> children not yet evicted
        order = []
        while heap and len(order) < n:
            page = heapq.heappop(heap)[1]
            order.append(page)
            parent = self._by_page[page].parent
            if parent is self.root:
                continue
            left[parent.page] = left.get(parent.page, len(parent.children)) - 1
            if left[parent.page] == 0 and not in_use(parent.page):
                heapq.heappush(heap, (parent.stamp, parent.page))
        return order

    def entries(self) -> list[tuple[tuple[int, ...], int]]:
        """(token prefix up to the end of the node's key, page) for every node, depth first."""
        out, stack = [], [(self.root, ())]
        while stack:
            node, prefix = stack.pop()
            for child in node.children.values():
                out.append((prefix + child.key, child.page))
                stack.append((child, prefix + child.key))
        return out

    def sequences(self, head: int) -> list[tuple[int, tuple[int, ...], int, int, int]]:
        """(n_tokens, first head tokens, n_pages, hits, stamp) of every root-to-leaf path (the cached
        sequences): hits, the matches that reused any of its pages; stamp, its last use (the leaf's:
        eviction's order). Linear in the tree: only the first head tokens of a path are kept."""
        out, stack = [], [(self.root, 0, (), 0, 0)]
        while stack:
            node, n, first, depth, hits = stack.pop()
            for child in node.children.values():
                item = (child, n + len(child.key), first + child.key if len(first) < head else first, depth + 1,
                        max(hits, child.hits))
                if child.children:
                    stack.append(item)
                else:
                    out.append((item[1], item[2][:head], item[3], item[4], child.stamp))
        return out

    def check(self):
        """Raise InvariantError unless the structure holds (see the module docstring)."""
        seen = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            for key, child in node.children.items():
                self._check_node(node, key, child)
                seen += 1
                stack.append(child)
        if seen != len(self._by_page):
            raise InvariantError(f"{seen} nodes reachable, {len(self._by_page)} indexed")

    def _check_node(self, parent: Node, key: tuple[int, ...], child: Node):
        ps = self.page_size
        if child.key != key or child.parent is not parent or self._by_page.get(child.page) is not child:
            raise InvariantError(f"tree node of page {child.page} is mislinked (a page in two nodes?)")
        if not 1 <= len(key) <= ps or (len(key) < ps and child.children):
            raise InvariantError(f"page {child.page}: key of {len(key)} tokens with children={len(child.children)}")
        for other in parent.children.values():
            if len(other.key) < len(key) and key[:len(other.key)] == other.key:
                raise InvariantError(f"partial page {other.page} is covered by sibling page {child.page}")
