"""treespec_sim.validation: the argument checks written once (each names its argument)."""

import re
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import validation as v


@pytest.mark.parametrize("good, want", [(1, 1), (5, 5), (np.int64(7), 7)])
def test_check_budget_takes_positive_integers(good, want):
    got = v.check_budget(good)
    assert got == want and type(got) is int


@pytest.mark.parametrize("good, want", [(0, 0), (5, 5), (np.int64(7), 7)])
def test_check_nonnegative_int_takes_zero(good, want):
    got = v.check_nonnegative_int(good, "seed")
    assert got == want and type(got) is int


@pytest.mark.parametrize("bad", [0, -1, 2.0, 16.7, True, np.bool_(True), "3", None])
def test_check_budget_refuses_and_names_the_argument(bad):
    with pytest.raises(ValueError, match="max_budget"):
        v.check_budget(bad, "max_budget")


@pytest.mark.parametrize("bad", [0, -2, 1.0, True, np.bool_(True), "1"])
def test_check_positive_int_refuses_and_names_the_argument(bad):
    with pytest.raises(ValueError, match="rounds must be a positive integer"):
        v.check_positive_int(bad, "rounds")


def test_check_positive_int_returns_a_python_int():
    got = v.check_positive_int(np.int32(3), "n")
    assert got == 3 and type(got) is int


def test_check_rng_takes_a_generator_only():
    rng = np.random.default_rng(0)
    assert v.check_rng(rng) is rng
    for bad in (0, np.random.RandomState(0), None):
        with pytest.raises(ValueError, match=r"draw_rng must be a numpy\.random\.Generator"):
            v.check_rng(bad, "draw_rng")


def test_check_root_token_bounds():
    assert v.check_root_token(-1) == -1 and v.check_root_token(9, vocab_size=10) == 9
    with pytest.raises(ValueError, match="outside the vocabulary"):
        v.check_root_token(10, vocab_size=10)
    with pytest.raises(ValueError, match="root_token must be >= -1"):
        v.check_root_token(-2)
    with pytest.raises(ValueError, match="tok must be an integer"):
        v.check_root_token(1.0, "tok")


def test_check_temperature_zero_is_greedy_unless_positive_is_asked():
    assert v.check_temperature(0) == 0.0 and type(v.check_temperature(1)) is float
    with pytest.raises(ValueError, match="T must be finite and > 0"):
        v.check_temperature(0.0, "T", positive=True)
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="T must be finite"):
            v.check_temperature(bad, "T")
    for bad in ("1", True, None):
        with pytest.raises(ValueError, match="T must be a real number"):
            v.check_temperature(bad, "T")


def test_row_sum_tolerance_is_loosest_for_an_unknown_dtype():
    assert v.row_sum_tolerance("float32") == v.ROW_SUM_TOL_BY_DTYPE["float32"]
    assert v.row_sum_tolerance("int8") == max(v.ROW_SUM_TOL_BY_DTYPE.values())


def test_as_float_array_keeps_float32_and_float64_without_a_copy():
    for dtype in (np.float32, np.float64):
        x = np.zeros((2, 3), dtype=dtype)
        arr, source = v.as_float_array(x, "x")
        assert arr is x and source == np.dtype(dtype).name
    arr, source = v.as_float_array(np.zeros(3, dtype=np.float16), "x")
    assert arr.dtype == np.float64 and source == "float16"
    with pytest.raises(ValueError, match="x must be a float array"):
        v.as_float_array(np.array(["a"]), "x")


def test_check_log_q_refuses_logits_and_names_the_row():
    lp = np.log(np.full((2, 4), 0.25))
    out, row_max = v.check_log_q(lp)
    assert out is lp and np.allclose(row_max, np.log(0.25))
    shifted = lp - lp.max(axis=1, keepdims=True)       # max-shifted: every row sums to 4
    with pytest.raises(ValueError, match=r"drafts\[0\] sums to 4"):
        v.check_log_q(shifted, "drafts")
    with pytest.raises(ValueError, match="shape"):
        v.check_log_q(np.zeros(4))
    assert v.check_log_q(shifted, check_sums=False)[0] is shifted


#: A hand-written type check: a bool test (``isinstance(x, bool)``, ``(bool, np.bool_)``,
#: ``bool | np.bool_``) beside an integer or number test, an ``Integral`` / ``Real`` test, or
#: ``not isinstance(x, int)`` (which lets ``True`` through as 1).
_HAND_WRITTEN = re.compile(r"isinstance\([^,()]+,\s*\(?[^)]*\b(bool|Integral|Real)\b"
                           r"|not isinstance\([^,()]+,\s*int\)")
#: Modules allowed a hand-written check, each with its reason: none.
_EXCEPTIONS: dict[str, str] = {}


def test_type_checks_are_written_once_in_validation():
    root = Path(__file__).resolve().parents[2] / "treespec_sim"
    found = [f"{p.relative_to(root)}:{i}" for p in sorted(root.rglob("*.py"))
             if p.name != "validation.py" and str(p.relative_to(root)) not in _EXCEPTIONS
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if _HAND_WRITTEN.search(line)]
    assert found == [], "use validation.is_int / is_number / is_index / check_param"


def test_the_type_check_grep_finds_each_form():
    for line in ("if isinstance(x, bool) or not isinstance(x, int):",
                 "if isinstance(x, (bool, np.bool_)):",
                 "if isinstance(self.k, bool | np.bool_) or k < 0:",
                 "if not isinstance(v, numbers.Integral):",
                 "if isinstance(v, Real):",
                 "if not isinstance(rounds, int) or rounds < 1:"):
        assert _HAND_WRITTEN.search(line), line
    for line in ("if isinstance(x, int | np.integer):", "if isinstance(key, tuple) and key:",
                 "flag = isinstance(x, dict)  # a bool"):
        assert not _HAND_WRITTEN.search(line), line


def test_interval_constraints_check_in_one_format():
    from treespec_sim.validation import Interval, check_param, is_int, is_number

    assert check_param(3, "k", Interval("int", 1)) == 3
    for bad in (0, True, 1.0, "2", np.bool_(True)):
        with pytest.raises(ValueError, match=r"^k must be an integer >= 1; got "):
            check_param(bad, "k", Interval("int", 1))
    assert np.int64(2) in Interval("int", 1) and np.int64(2) not in Interval("int", 1, numpy=False)
    half_open = Interval("real", 0.0, 1.0, closed="left")
    assert 0.0 in half_open and 1.0 not in half_open and float("nan") not in half_open
    assert half_open.describe() == "a number in [0, 1)"
    assert is_number(np.float64(0.5), numpy=False) and not is_number(True)
    assert not is_int(False) and is_int(np.int32(1)) and not is_int(np.int32(1), numpy=False)
