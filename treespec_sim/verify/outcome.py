"""The result of verifying one draft tree."""

from __future__ import annotations

from dataclasses import dataclass

from ..tree import DraftTree

__all__ = ["Outcome"]


@dataclass(frozen=True)
class Outcome:
    """What one verification round commits.

    Attributes
    ----------
    path : tuple of int
        Accepted node ids from the root's child downwards (root excluded; may be empty).
    bonus : int
        The token the target emits after the accepted path.
    tokens : tuple of int
        The emitted tokens: the path's tokens followed by ``bonus``.
    """

    path: tuple[int, ...]
    bonus: int
    tokens: tuple[int, ...]

    @property
    def tau(self) -> int:
        """Tokens committed this round (accepted + bonus)."""
        return len(self.path) + 1

    @classmethod
    def from_path(cls, tree: DraftTree, path: tuple[int, ...], bonus: int) -> Outcome:
        tokens = (*tuple(int(tree.token[v]) for v in path), int(bonus))
        return cls(tuple(int(v) for v in path), int(bonus), tokens)
