"""Every public entry point refuses bad argument types with a ValueError naming the argument
(issue 42, item 3): a fuzz-style table of entry points x arguments x bad values. Nothing is
rounded or coerced (``budget=16.7`` is not ``16``, ``True`` is not ``1``), and a sweep
config's grid refuses the same values with the same message."""

import numpy as np
import pytest

import treespec_sim as ts
from treespec_sim import exits, policies, verify
from treespec_sim.sweep import plan_from_dict

W = ts.make_world("small", seed=0)
CTX = W.sample_context(np.random.default_rng(0))
LQ = W.draft(CTX)
V = LQ.shape[1]
TREE = policies.ddtree(LQ, 6, root_token=int(CTX.last_token))
ROWS = W.target_oracle(CTX, TREE, 1.0)
COST = {"draft_cost": 0.01, "verify_cost": lambda n: 0.03 + 0.001 * n}
PROPOSAL = policies.marginal_proposal(LQ)


def _rng():
    return np.random.default_rng(0)


# ---------------------------------------------------------------------------- bad values
BUDGET = [16.7, 16.0, True, False, "16", 0, -1, np.float64(4.0), [4], None]
COUNT = [1.5, 2.0, True, "3", 0, -1, None]
TEMPERATURE = ["1", True, float("nan"), float("inf"), -0.5, None, [1.0], 1j]
POSITIVE_TEMPERATURE = [*TEMPERATURE, 0.0]
RNG = [0, None, np.random.RandomState(0), "rng"]
ROOT = [1.5, True, "3", -2, None, V]
FLAG = [0, 1, "yes", None]
SEED = [-1, 1.5, "0", True, None]
TREES = [None, [0, 1], "tree", np.zeros(3)]
RULE = [3, "nope", None]
SECONDS = ["1", -1.0, float("nan"), True, None]


def _with(base):
    """``call(**override)``: the entry point with valid arguments, ``override`` replacing some."""
    fn, kwargs = base
    return lambda **k: fn(**{**kwargs, **k})


#: entry point -> (callable, valid keyword arguments), and for each argument its bad values.
CASES = {
    "run_round": ((lambda **k: ts.run_round(W, CTX, **k)),
                  {"method": "ddtree", "budget": 8, "rng": _rng()},
                  {"budget": BUDGET[:-1], "temperature": [*TEMPERATURE[:-3], 1j], "rng": RNG,
                   "sample": FLAG, "nested": FLAG, "method": [3, None, "nope"],
                   "rule": [3, "nope"], "options": [3, "x"]}),
    "run_rounds": ((lambda **k: ts.run_rounds(W, **k)),
                   {"rng": _rng(), "rounds": 2, "method": "ddtree", "budget": 4},
                   {"rounds": COUNT[:-1], "rounds_per_sequence": COUNT[:-1],
                    "budget": BUDGET[:-1]}),
    "decode": ((lambda **k: ts.decode(W, CTX, **k)),
               {"n_tokens": 4, "rng": _rng(), "method": "ddtree", "budget": 4},
               {"n_tokens": [1.5, True, "4", -1, None], "budget": BUDGET[:-1], "rng": RNG}),
    "make_world": (ts.make_world, {"spec": "small", "seed": 0},
                   {"seed": SEED, "vocab_size": [0, 1.5, True, "64"],
                    "depth": [0, 1.5, True, "3"], "spec": [3, None]}),
    "get_cost_model": (ts.get_cost_model, {"name_or_path": "h200-qwen3-8b"},
                       {"name_or_path": [3, None, 1.5]}),
    "DraftTree.from_parents": (ts.DraftTree.from_parents, {"parent": [-1, 0], "token": [3, 4]},
                               {"parent": [[-1, 1], [0, 0], None], "token": [[3], None]}),
    "ddtree": (policies.ddtree, {"log_q": LQ, "budget": 4},
               {"budget": BUDGET, "root_token": ROOT, "log_q": [None, "x", np.zeros(3)]}),
    "ddtree_with_mask": (policies.ddtree_with_mask, {"log_q": LQ, "budget": 4},
                         {"budget": BUDGET}),
    "caddtree": (policies.caddtree, {"log_q": LQ, **COST, "max_budget": 32},
                 {"max_budget": BUDGET, "root_token": ROOT, "start_budget": [1.5, True, "2", 0],
                  "draft_cost": SECONDS, "verify_cost": [3, None]}),
    "exhaustive_budget_tree": (policies.exhaustive_budget_tree,
                               {"log_q": LQ, **COST, "max_budget": 32},
                               {"max_budget": BUDGET, "draft_cost": SECONDS}),
    "longrun_tree": (policies.longrun_tree, {"log_q": LQ, "lam": 10.0, **COST, "max_budget": 32},
                     {"max_budget": BUDGET, "lam": SECONDS}),
    "budget_curve": (policies.budget_curve, {"log_q": LQ, **COST, "max_budget": 32},
                     {"max_budget": BUDGET}),
    "chain": (policies.chain, {"log_q": LQ}, {"length": COUNT[:-1], "root_token": ROOT}),
    "dynamic_tree": (policies.dynamic_tree, {"log_q": LQ, "budget": 8},
                     {"budget": BUDGET, "top_k": COUNT, "root_token": ROOT}),
    "tsubame": (policies.tsubame, {"log_q": LQ, "budget": 8, "rng": _rng()},
                {"budget": BUDGET, "rng": RNG, "temperature": TEMPERATURE,
                 "scheme": [3, "nope", None], "planner": [3, "nope"], "root_token": ROOT,
                 "proposal_temperature": [*TEMPERATURE[:5], 0.0]}),
    "tsubame_shape": (policies.tsubame_shape, {"log_q": LQ, "budget": 8},
                      {"budget": BUDGET, "temperature": TEMPERATURE, "planner": [3, "nope"]}),
    "fill_tree": (policies.fill_tree,
                  {"shape": TREE, "proposal": PROPOSAL, "scheme": "without_replacement",
                   "rng": _rng()},
                  {"shape": TREES, "scheme": [3, "nope", None], "rng": RNG,
                   "temperature": TEMPERATURE, "proposal": [3, None],
                   "cap_to_support": FLAG}),
    "sampled_chain": (policies.sampled_chain, {"proposal": PROPOSAL, "length": 4, "rng": _rng()},
                      {"length": COUNT, "rng": RNG, "temperature": TEMPERATURE,
                       "root_token": ROOT[:-1]}),
    "k_ary_shape": (policies.k_ary_shape, {"width": 2, "depth": 3},
                    {"width": COUNT, "depth": COUNT, "root_token": ROOT[:-1]}),
    "prefix_tree": (policies.prefix_tree, {"tree": TREE, "budget": 3},
                    {"budget": [1.5, True, "3", -1, None], "tree": TREES}),
    "path_probabilities": (policies.path_probabilities, {"tree": TREE, "lp": LQ},
                           {"tree": TREES}),
    "tempered": (policies.tempered, {"row": np.full(4, 0.25), "temperature": 1.0},
                 {"temperature": POSITIVE_TEMPERATURE}),
    "CaDDTreePolicy": (policies.CaDDTreePolicy, dict(COST),
                       {"max_budget": BUDGET, "margin": [*SECONDS, 0.5]}),
    "LongRunPolicy": (policies.LongRunPolicy, dict(COST),
                      {"max_budget": BUDGET, "prior_rounds": [*SECONDS, 0.0]}),
    "verify": (verify.verify, {"tree": TREE, "target_rows": ROWS, "rule": "follow", "rng": _rng()},
               {"rule": RULE, "rng": RNG, "tree": TREES}),
    "expected_length": (verify.expected_length,
                        {"tree": TREE, "target_rows": ROWS, "rule": "follow"},
                        {"rule": RULE, "tree": TREES}),
    "reach_probabilities": (exits.reach_probabilities, {"tree": TREE, "target_rows": ROWS},
                            {"tree": TREES}),
    "exit_law": (exits.exit_law, {"tree": TREE, "target_rows": ROWS}, {"tree": TREES}),
    "coverage": (exits.coverage, {"tree": TREE, "target_rows": ROWS}, {"tree": TREES}),
    "exit_decomposition": (exits.exit_decomposition, {"tree": TREE, "target_rows": ROWS},
                           {"tree": TREES, "depth_limit": COUNT[:-1]}),
    "Round.at_budget": ((lambda **k: ts.run_round(W, CTX, method="ddtree", budget=8, rng=_rng(),
                                                  nested=True).at_budget(**k)),
                        {"budget": 4}, {"budget": BUDGET}),
}

TABLE = [(entry, arg, value) for entry, (_, _, bad) in CASES.items()
         for arg, values in bad.items() for value in values]


def _id(entry: str, arg: str, value) -> str:
    """A test id that is the same in every process (no object addresses)."""
    shown = repr(value) if isinstance(value, int | float | str | complex | type(None)) \
        else type(value).__name__
    return f"{entry}-{arg}={shown}"[:60]


@pytest.mark.parametrize("entry", list(CASES))
def test_every_entry_point_runs_with_its_valid_arguments(entry):
    fn, kwargs, _ = CASES[entry]
    fn(**kwargs)


@pytest.mark.parametrize("entry, arg, value", TABLE,
                         ids=[_id(*case) for case in TABLE])
def test_a_bad_argument_is_a_value_error_naming_it(entry, arg, value):
    fn, kwargs, _ = CASES[entry]
    with pytest.raises(ValueError) as info:
        fn(**{**kwargs, arg: value})
    msg = str(info.value)
    assert arg in msg, msg
    assert "\n" not in msg   # one line


def test_the_issue_examples():
    rng = np.random.default_rng(0)
    for b in (16.7, True, "16", 0):
        with pytest.raises(ValueError, match=f"^budget must be a positive integer; got {b!r}$"):
            ts.run_round(W, CTX, method="ddtree", budget=b, rng=rng)
    with pytest.raises(ValueError, match="budget must be a positive integer; got 0"):
        policies.ddtree(LQ, 0)
    # numpy integers are integers
    assert ts.run_round(W, CTX, method="ddtree", budget=np.int64(8), rng=rng).tree_size == 8
    assert policies.ddtree(LQ, np.int32(3)).size == 3


@pytest.mark.parametrize("key, value, api", [
    ("budgets", 16.7, lambda: policies.ddtree(LQ, 16.7)),
    ("budgets", True, lambda: policies.ddtree(LQ, True)),
    ("budgets", "16", lambda: policies.ddtree(LQ, "16")),
    ("budgets", 0, lambda: policies.ddtree(LQ, 0)),
    ("temperatures", "1", lambda: ts.run_round(W, CTX, method="chain", temperature="1",
                                               rng=_rng())),
    ("temperatures", -1.0, lambda: ts.run_round(W, CTX, method="chain", temperature=-1.0,
                                                rng=_rng())),
])
def test_the_config_and_the_api_give_the_same_message(key, value, api):
    with pytest.raises(ValueError) as cfg:
        plan_from_dict({"ddtree": {"regimes": ["small"], key: [value]}})
    with pytest.raises(ValueError) as call:
        api()
    # "config: ddtree.budgets must be ..." and "budget must be ...": the same after the name
    tail = str(call.value).split(" ", 1)[1]
    assert str(cfg.value) == f"config: ddtree.{key} {tail}"
