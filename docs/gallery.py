"""Draw the gallery figure of ``docs/usage.md`` ("Look at a tree"): one DDTree round, twice.

Left: nodes coloured by the target's reach probability P(v); right: by exit mass w(v), where
target continuations leave the tree. Both highlight the path the verifier accepted.

Run from the repository root: ``python docs/gallery.py`` (writes
``docs/figures/tree_gallery.png``; ``--out PATH`` writes elsewhere).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from treespec_sim import plot
from treespec_sim.engine import run_round
from treespec_sim.synth import make_world

OUT = Path(__file__).resolve().parent / "figures" / "tree_gallery.png"


def gallery(out: Path = OUT) -> Path:
    """One T = 1 round of DDTree at B = 24 on the ``small`` world, drawn two ways; returns
    the file written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # --- the code shown in docs/usage.md, "Look at a tree" ---------------------------------
    world, rng = make_world("small", seed=0), np.random.default_rng(0)
    rnd = run_round(world, world.sample_context(rng), method="ddtree", budget=24,
                    temperature=1.0, rng=rng)

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 4.6), layout="constrained")
    plot.tree(rnd.tree, rows=rnd.rows, outcome=rnd.outcome, ax=left)
    plot.tree(rnd.tree, rows=rnd.rows, outcome=rnd.outcome, ax=right, color_by="exit",
              cmap="Oranges")
    left.set_title(f"reach probability: DDTree B = {rnd.tree_size}, T = 1, "
                   f"E[τ] = {rnd.expected_tau:.2f}", fontsize=10)
    right.set_title("exit mass: where target continuations leave the tree "
                    f"(uncovered {rnd.exits.by_cause['uncovered']:.2f}, "
                    f"budget {rnd.exits.by_cause['budget']:.2f})", fontsize=10)
    # -----------------------------------------------------------------------------------------
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"PNG to write (default {OUT})")
    print(f"wrote {gallery(ap.parse_args().out)}")
