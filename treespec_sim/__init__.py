"""treespec_sim: tree speculative decoding with block-diffusion drafters, simulated exactly.

See ``docs/usage.md``. The public contract (``DraftTree``, ``policies.ddtree``,
``exits.*``, ``verify.*``) is described in the project's design notes and is kept stable.
"""

from .tree import DraftTree

__all__ = ["DraftTree", "__version__"]
__version__ = "0.1.0"
