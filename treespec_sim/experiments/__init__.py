"""The computations behind three sweep families (budget choice, sampled trees, verifier gains).

Each module runs its rounds through :func:`treespec_sim.engine.run_round` and returns rows or
results; the sweep (:mod:`treespec_sim.sweep`) is the one command that runs, resumes and writes
them.
"""
