"""DAPO overlong reward shaping ("soft overlong punishment", DAPO §3.4, arXiv 2503.14476).

For a response of |y| tokens, a maximum length L_max and a punishment interval L_cache:

                 ⎧ 0                                  |y| ≤ L_max − L_cache
    R_length(y) = ⎨ ((L_max − L_cache) − |y|) / L_cache   L_max − L_cache < |y| ≤ L_max
                 ⎩ −1                                 L_max < |y|

It is continuous at both break points (0 at L_max − L_cache, −1 at L_max) and non-increasing in
|y|. L_cache = 0 degenerates to a hard cut: 0 up to L_max, −1 beyond. DAPO used L_max = 20480,
L_cache = 4096. The term is added to the correctness reward as its own named reward.
"""

from __future__ import annotations

__all__ = ["overlong_penalty"]


def overlong_penalty(length: int, max_tokens: int, cache_tokens: int) -> float:
    """R_length for a response of ``length`` tokens (see the module docstring)."""
    if length < 0:
        raise ValueError(f"response length must be >= 0, got {length}")
    if not 0 <= cache_tokens <= max_tokens:
        raise ValueError(f"need 0 <= cache_tokens <= max_tokens, got {cache_tokens} and {max_tokens}")
    start = max_tokens - cache_tokens
    if length <= start:
        return 0.0
    if length > max_tokens:
        return -1.0
    return (start - length) / cache_tokens
