r"""Adapters: verifiers written for an engine's tensors, as samplers for ``check_verifier``.

A chain verifier in an engine takes the drafted tokens and *logits* -- the drafter's at each
drafted position, the target's at each position plus one for the bonus -- as batched tensors,
and draws its coins from the framework's generator. :func:`chain_logits` turns a checker round
(a chain ``tree``, ``target_rows``, ``proposal``) into those arrays; :func:`torch_rng` runs a
block with torch's global generator seeded from the checker's ``rng`` and restored afterwards
(so the check is reproducible and leaves torch's state alone).
:func:`hf_speculative_sampling` is the worked example: Hugging Face transformers'
``generation.utils._speculative_sampling`` (the chain verifier of assisted generation at
``T > 0``), with or without ``assistant_ensemble_weight``. With weight ``w`` it accepts a draft
with probability :math:`\min(1, 1 - w + w\,p/q)` and draws a rejection's replacement from
:math:`\mathrm{norm}((p - q)_+)`, so its first token has law :math:`w p + (1 - w) q`, at total
variation :math:`(1 - w)\,\mathrm{TV}(q, p)` from the target (DIVERSE, arXiv 2604.07622: lossy
by design). torch and transformers are imported when an adapter is called.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.verify import check_chain

__all__ = ["chain_logits", "hf_speculative_sampling", "torch_rng"]


def chain_logits(tree: DraftTree, target_rows, proposal
                 ) -> tuple[list[int], np.ndarray, np.ndarray]:
    """``(tokens, draft_logits (gamma, V), target_logits (gamma + 1, V))`` of a chain round.

    Logits are natural logarithms of the rows (``-inf`` where a row is 0), so a softmax gives
    the rows back; the proposal's NaN leaf row is not read.
    """
    check_chain(tree)
    gamma = tree.size
    if gamma < 1:
        raise ValueError("a chain verifier needs at least one drafted token")
    with np.errstate(divide="ignore"):
        target = np.log(np.asarray(target_rows, dtype=np.float64)[: gamma + 1])
        draft = np.log(np.asarray(proposal, dtype=np.float64)[:gamma])
    return [int(t) for t in tree.token[1:]], draft, target


@contextlib.contextmanager
def torch_rng(rng: np.random.Generator) -> Iterator[None]:
    """Run the block with torch's global CPU generator seeded from ``rng`` (one draw), and
    restore the generator's state afterwards."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is an optional extra
        raise ImportError("this adapter needs torch: pip install 'treespec[models]'") from exc
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(rng.integers(2**63 - 1)))
        yield


def hf_speculative_sampling(assistant_ensemble_weight: float | None = None):
    """Hugging Face transformers' ``_speculative_sampling`` as a sampler of the ``"chain"``
    scheme (module docstring); ``assistant_ensemble_weight`` as in its generation config."""

    def sample(tree, target_rows, proposal, rng):
        import torch
        from transformers.generation.utils import _speculative_sampling

        tokens, draft, target = chain_logits(tree, target_rows, proposal)
        gamma = len(tokens)
        # candidate_input_ids holds the prompt and the drafts; the function reads the last
        # gamma (a one-token prompt: the root)
        ids = torch.tensor([[max(int(tree.token[0]), 0), *tokens]], dtype=torch.long)
        with torch_rng(rng):
            valid, _ = _speculative_sampling(ids, torch.from_numpy(draft)[None], gamma,
                                             torch.from_numpy(target)[None],
                                             assistant_ensemble_weight=assistant_ensemble_weight)
        return [int(t) for t in valid.reshape(-1).tolist()]

    sample.__name__ = f"hf_speculative_sampling[w={assistant_ensemble_weight}]"
    return sample
