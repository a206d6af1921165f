"""The synthetic server's prefix cache: block hashes chained over a prompt's tokens, as vLLM's
KV cache manager keeps them (``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens``).

A prompt's cached tokens are its longest common prefix with any earlier prompt, in whole
blocks, and at most ``len - 1`` tokens: the last token is always computed
(``KVCacheManager.get_computed_blocks``: ``max_cache_hit_length = num_tokens - 1``). Only
prompts fill the cache here (vLLM also caches the blocks a request generates). Nothing is
ever evicted.
"""

from __future__ import annotations

from collections.abc import Sequence


class PrefixCache:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._blocks: set[int] = set()

    def _hashes(self, tokens: Sequence[object]) -> list[int]:
        out: list[int] = []
        parent = 0
        b = self.block_size
        for start in range(0, len(tokens) - b + 1, b):
            parent = hash((parent, tuple(tokens[start : start + b])))
            out.append(parent)
        return out

    def lookup(self, tokens: Sequence[object]) -> int:
        """Cached tokens for a prompt, without adding it."""
        hit = 0
        for h in self._hashes(tokens[: max(0, len(tokens) - 1)]):
            if h not in self._blocks:
                break
            hit += self.block_size
        return hit

    def admit(self, tokens: Sequence[object]) -> int:
        """Cached tokens for a prompt; then its full blocks are cached too."""
        hit = self.lookup(tokens)
        self._blocks.update(self._hashes(tokens))
        return hit
