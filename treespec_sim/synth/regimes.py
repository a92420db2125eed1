"""Regimes: every knob of a synthetic world in one frozen, validated value.

A :class:`RegimeSpec` fixes the *law* of a world (vocabulary, target-chain structure, drafter
imperfections); :func:`treespec_sim.synth.make_world` turns it plus a seed into concrete arrays.
The named regimes in :data:`REGIMES` span exhaustively enumerable toys (``"tiny"``, ``"small"``)
and three ``V = 32768``, ``L = 15`` worlds from low to high entropy.

Target knobs (see :mod:`treespec_sim.synth.world` for the formulas)
    ``vocab_size`` V, ``depth`` L, ``n_topics``, ``successors`` s, ``sharpness``,
    ``sharpness_spread``, ``successor_decay``, ``zipf_exponent``, ``topic_strength``,
    ``topic_density``, ``context_burn_in``, ``logit_scale``.
Drafter knobs (see :mod:`treespec_sim.synth.drafter`)
    ``mismatch``, ``boost_noise``, ``topic_awareness``, ``calibration``, ``degradation``,
    ``junk``, ``correction_quality``, ``variant_noise``, ``depth_sharpening``, ``hard_miss``.

Calibrated regimes
    The eight dataset regimes (``math500``, ``gsm8k``, ``aime25``, ``humaneval``, ``mbpp``,
    ``livecodebench``, ``mt-bench``, ``alpaca``) are fitted by :mod:`treespec_sim.calibrate` to
    published Qwen3-8B acceptance lengths and loaded from the package data file
    ``treespec_sim/data/calibration.json`` when this module is imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

from ..files import read_json
from ..validation import Interval, check_param, is_number

__all__ = [
    "CALIBRATION_FILE",
    "DRAFTER_VARIANTS",
    "REGIMES",
    "RegimeSpec",
    "drafter_variant",
    "get_regime",
    "is_regime_file",
    "load_calibrated",
    "regime_file",
    "register_regime",
    "resolve_regime",
]

#: The package data file holding the calibrated regimes (written by
#: ``python -m treespec_sim.calibrate``).
CALIBRATION_FILE = Path(__file__).resolve().parent.parent / "data" / "calibration.json"


@dataclass(frozen=True)
class RegimeSpec:
    """All knobs of a synthetic world (immutable, validated on construction).

    Attributes
    ----------
    name : str
        Short identifier (the key in :data:`REGIMES` for named regimes).
    description : str
        One line saying what the regime models.
    vocab_size : int
        ``V >= 2``.
    depth : int
        ``L >= 1``, the number of draft positions (block size of the drafter).
    n_topics : int
        Number of per-sequence topics ``z`` (``>= 1``).
    successors : int
        ``s``, boosted successors per token, ``1 <= s <= V - 1`` (so every row keeps at least
        one unboosted token).
    sharpness : float
        Mean log-odds of a token's first successor against the *whole* background mass:
        ``g_a0 = sharpness + sharpness_spread * N(0, 1)``. Large = low entropy.
    sharpness_spread : float
        Per-row standard deviation of ``g_a0`` (``>= 0``).
    successor_decay : float
        Mean log-odds drop between consecutive successors, ``g_a,j+1 = g_aj - Exp(decay)``
        (``>= 0``; small = many near-equal continuations).
    zipf_exponent : float
        Background log-weights ``-zipf_exponent * log(rank)`` over a random permutation
        (``>= 0``; 0 = uniform background).
    topic_strength : float
        Scale of the per-context topic term added to the background (``>= 0``).
    topic_density : float
        Fraction of tokens each topic vector touches, in ``(0, 1]`` (1 = dense Gaussian).
    context_burn_in : int
        Steps of the ``T = 1`` target chain run from a background draw to produce the last
        token of a sampled context (``>= 0``).
    mismatch : float
        Probability that a drafter successor slot names a random wrong token, in ``[0, 1]``.
    boost_noise : float
        Std of Gaussian noise added to each drafter boost (``>= 0``).
    topic_awareness : float
        Fraction of the topic term the drafter knows, in ``[0, 1]``.
    calibration : float
        Temperature applied to the drafter's logits (``> 0``): ``< 1`` over-confident,
        ``> 1`` under-confident.
    degradation : float
        Depth degradation ``eta_d = degradation * (d - 1) / (L - 1)``, in ``[0, 1]``.
    junk : float
        Junk mass ``j_d = junk * d / L`` mixed in as uniform noise, in ``[0, 1]``.
    correction_quality : float
        ``kappa`` of the conditional-correction proposal, in ``[0, 1]``.
    variants : int
        ``m``, surface variants per word class (``>= 1``; ``vocab_size`` must be a multiple).
        With ``m > 1`` the chain runs over ``V / m`` classes and emits one of a class's ``m``
        tokens: the next token depends on the *class* of the last one, not on which variant
        was chosen, so a tree that branches on variants keeps useful continuations (as real
        text does: a draft that picks a near-synonym can still match what follows).
    variant_spread : float
        Std of the target's log-weights of the variants within a class (``>= 0``).
    variant_noise : float
        Std of the drafter's error on those log-weights (``>= 0``): near-miss drafts whose
        right token is a sibling.
    depth_sharpening : float
        Per-depth output calibration of the drafter, ``> -1``: its depth-``d`` marginal is
        raised to the power ``beta_d = 1 + depth_sharpening (d - 1) / (L - 1)`` and
        renormalised (0 = unchanged; ``> 0`` = more confident deep, ``< 0`` = flatter deep). It
        never moves a row's argmax (see :mod:`treespec_sim.synth.drafter`).
    logit_scale : float
        ``alpha > 0``: the target's logits are multiplied by ``alpha`` before tempering, so its
        law at temperature ``T`` is ``softmax(alpha * l / T)`` (a target knob; the drafter does
        not see it). It sets how peaked the target is at ``T = 1`` -- how much of its mass the
        junk floor, the surface variants and the runner-up successors hold -- without moving
        any argmax, so the target's greedy (``T = 0``) law is the same for every ``alpha``.
        Real language models are near-deterministic at most positions even at ``T = 1``;
        the calibrated regimes fit ``alpha`` to the published ``T = 1`` acceptance length
        (:mod:`treespec_sim.calibrate`).
    hard_miss : float
        Probability, in ``[0, 1]``, that a successor slot of the drafter's *class* table names
        a random wrong class (keeping the slot's effective logit), drawn from a random stream
        of its own so that the renamed slots grow monotonically with the knob and every other
        array of the world stays the same. Where the target then goes, the drafter ranks its
        token with the background, beyond any tree's reach: a *hard* miss, against the near
        misses of ``variant_noise`` that a tree recovers. It sets how much a large tree gains
        over a small one (:mod:`treespec_sim.synth.world`, *Hard misses*). Word-class worlds
        only (``variants > 1``); 0 (the default) leaves a world bit for bit as it was.
    """

    name: str
    description: str
    vocab_size: int
    depth: int = 15
    n_topics: int = 16
    successors: int = 8
    sharpness: float = 3.0
    sharpness_spread: float = 1.0
    successor_decay: float = 1.0
    zipf_exponent: float = 1.0
    topic_strength: float = 1.0
    topic_density: float = 0.05
    context_burn_in: int = 64
    mismatch: float = 0.1
    boost_noise: float = 0.5
    topic_awareness: float = 0.5
    calibration: float = 1.0
    degradation: float = 0.5
    junk: float = 0.02
    correction_quality: float = 0.5
    variants: int = 1
    variant_spread: float = 1.0
    variant_noise: float = 0.0
    depth_sharpening: float = 0.0
    logit_scale: float = 1.0
    hard_miss: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string; got {self.name!r}")
        if not isinstance(self.description, str):
            raise ValueError(f"description must be a string; got {self.description!r}")
        _int(self, "vocab_size", lo=2)
        _int(self, "depth", lo=1)
        _int(self, "n_topics", lo=1)
        _int(self, "successors", lo=1)
        if self.successors > self.vocab_size - 1:
            raise ValueError(f"successors must be <= vocab_size - 1 = {self.vocab_size - 1}; "
                             f"got {self.successors}")
        _int(self, "context_burn_in", lo=0)
        _int(self, "variants", lo=1)
        if self.vocab_size % self.variants:
            raise ValueError(f"variants must divide vocab_size = {self.vocab_size}; got "
                             f"{self.variants}")
        if self.variants > 1 and self.successors * self.variants > self.vocab_size - 1:
            raise ValueError(f"successors * variants must be <= vocab_size - 1; got "
                             f"{self.successors} * {self.variants}")
        _real(self, "sharpness")
        for name in ("sharpness_spread", "successor_decay", "zipf_exponent", "topic_strength",
                     "boost_noise", "variant_spread", "variant_noise"):
            _real(self, name, lo=0.0)
        _real(self, "topic_density", lo=0.0, hi=1.0, lo_open=True)
        for name in ("mismatch", "topic_awareness", "degradation", "junk",
                     "correction_quality", "hard_miss"):
            _real(self, name, lo=0.0, hi=1.0)
        if self.hard_miss > 0.0 and self.variants == 1:
            raise ValueError(f"hard_miss needs a word-class world (variants > 1); got "
                             f"hard_miss = {self.hard_miss!r} with variants = 1")
        _real(self, "calibration", lo=0.0, lo_open=True)
        _real(self, "logit_scale", lo=0.0, lo_open=True)
        _real(self, "depth_sharpening", lo=-1.0, lo_open=True)

    def knobs(self) -> dict[str, object]:
        """All fields as a plain dict (for logging and JSON)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _int(spec: RegimeSpec, name: str, *, lo: int) -> None:
    v = check_param(getattr(spec, name), name, Interval("int"))
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}; got {v}")
    object.__setattr__(spec, name, int(v))


def _real(spec: RegimeSpec, name: str, *, lo: float | None = None, hi: float | None = None,
          lo_open: bool = False) -> None:
    v = getattr(spec, name)
    if not is_number(v):
        raise ValueError(f"{name} must be a real number; got {v!r}")
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite; got {v!r}")
    if lo is not None and (x < lo or (lo_open and x == lo)):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo:g}; got {v!r}")
    if hi is not None and x > hi:
        raise ValueError(f"{name} must be <= {hi:g}; got {v!r}")
    object.__setattr__(spec, name, x)


#: The named regimes. The three ``V = 32768`` worlds are tuned (roughly; a later calibration
#: refines them) so that the greedy (``T = 0``) argmax chain reaches mean tau ~ 6.5 / 4.8 / 3.1
#: over sampled contexts (seeds 0-2, 500 contexts each; :func:`~treespec_sim.synth.diagnostics.
#: mean_chain_tau`), and the drafter's argmax mass falls with depth to a unigram plateau.
REGIMES: dict[str, RegimeSpec] = {
    spec.name: spec
    for spec in (
        RegimeSpec(
            name="tiny", description="V = 3, L = 3: small enough to enumerate every path",
            vocab_size=3, depth=3, n_topics=2, successors=1, sharpness=1.0,
            sharpness_spread=0.5, successor_decay=1.0, zipf_exponent=1.0, topic_strength=0.5,
            topic_density=1.0, context_burn_in=8, mismatch=0.2, boost_noise=0.3,
            topic_awareness=0.5, calibration=1.0, degradation=0.3, junk=0.05,
            correction_quality=0.5),
        RegimeSpec(
            name="small", description="V = 8, L = 4: exact dense checks and brute force",
            vocab_size=8, depth=4, n_topics=3, successors=3, sharpness=1.5,
            sharpness_spread=0.7, successor_decay=1.0, zipf_exponent=1.0, topic_strength=0.5,
            topic_density=0.5, context_burn_in=16, mismatch=0.15, boost_noise=0.3,
            topic_awareness=0.5, calibration=1.0, degradation=0.4, junk=0.05,
            correction_quality=0.5),
        RegimeSpec(
            name="low-entropy",
            description="math/code-like: near-deterministic continuations, long accepted chains",
            vocab_size=32768, depth=15, n_topics=32, successors=8, sharpness=9.0,
            sharpness_spread=1.0, successor_decay=4.0, zipf_exponent=0.9, topic_strength=1.0,
            topic_density=0.05, context_burn_in=64, mismatch=0.01, boost_noise=0.3,
            topic_awareness=0.9, calibration=0.6, degradation=0.1, junk=0.02,
            correction_quality=0.5, variants=4, variant_spread=2.0, variant_noise=0.5),
        RegimeSpec(
            name="mid-entropy",
            description="mixed prose/structured text: a few plausible continuations per step",
            vocab_size=32768, depth=15, n_topics=32, successors=8, sharpness=3.5,
            sharpness_spread=1.0, successor_decay=2.0, zipf_exponent=0.9, topic_strength=1.5,
            topic_density=0.05, context_burn_in=64, mismatch=0.03, boost_noise=0.3,
            topic_awareness=0.7, calibration=0.6, degradation=0.2, junk=0.03,
            correction_quality=0.5, variants=4, variant_spread=1.5, variant_noise=0.6),
        RegimeSpec(
            name="high-entropy",
            description="open-ended chat: many near-equal continuations, short accepted chains",
            vocab_size=32768, depth=15, n_topics=32, successors=8, sharpness=2.0,
            sharpness_spread=1.0, successor_decay=1.0, zipf_exponent=0.9, topic_strength=2.0,
            topic_density=0.05, context_burn_in=64, mismatch=0.05, boost_noise=0.3,
            topic_awareness=0.5, calibration=0.7, degradation=0.2, junk=0.05,
            correction_quality=0.5, variants=4, variant_spread=1.0, variant_noise=0.8),
    )
}


def load_calibrated(path: Path | str = CALIBRATION_FILE) -> dict[str, RegimeSpec]:
    """The calibrated regimes stored in ``path`` (``{}`` if the file does not exist).

    Raises
    ------
    ValueError
        The file is not valid JSON or an entry's knobs do not make a valid :class:`RegimeSpec`.
    """
    if not Path(path).exists():
        return {}
    data = read_json(path, "calibration file")
    entries = data.get("regimes") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise ValueError(f"calibration file {path} is malformed: no 'regimes' object")
    out: dict[str, RegimeSpec] = {}
    for name, entry in entries.items():
        try:
            spec = RegimeSpec(**entry["knobs"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"calibration file {path}: regime {name!r} has bad knobs: "
                             f"{exc}") from None
        if spec.name != name:
            raise ValueError(f"calibration file {path}: entry {name!r} holds regime "
                             f"{spec.name!r}")
        out[name] = spec
    return out


REGIMES.update(load_calibrated())


def get_regime(name: str) -> RegimeSpec:
    """The named regime; ``ValueError`` listing the known names if ``name`` is unknown."""
    try:
        return REGIMES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown regime {name!r}; known regimes: "
                         f"{', '.join(sorted(REGIMES))}, or a fitted regime's .json "
                         "file") from None


def is_regime_file(name: object) -> bool:
    """Whether ``name`` names a regime file rather than a regime (a ``.json`` path)."""
    return isinstance(name, str | Path) and str(name).endswith(".json")


def regime_file(path: Path | str) -> RegimeSpec:
    """The one regime of a fitted-regime file (``python -m treespec_sim.acceptance fit``,
    ``acceptance.write_fit``: ``{"regimes": {name: {"knobs": ..., "fit": ...}}}``).

    Raises
    ------
    ValueError
        No such file, not a calibration-style file, bad knobs, or not exactly one regime.
    """
    if not Path(path).is_file():
        raise ValueError(f"regime: no such file {str(path)!r}")
    specs = load_calibrated(path)
    if len(specs) != 1:
        raise ValueError(f"regime: {path} holds {len(specs)} regimes; name one file per fitted "
                         "regime")
    return next(iter(specs.values()))


def resolve_regime(regime: str | Path | RegimeSpec) -> RegimeSpec:
    """A :class:`RegimeSpec`, a name of :data:`REGIMES` or a fitted regime's ``.json`` file
    (:func:`regime_file`)."""
    if isinstance(regime, RegimeSpec):
        return regime
    if isinstance(regime, str) and regime in REGIMES:
        return REGIMES[regime]
    if is_regime_file(regime):
        return regime_file(regime)
    return get_regime(regime)


def register_regime(spec: RegimeSpec) -> str:
    """Add ``spec`` to :data:`REGIMES` under its name (a fitted regime a sweep names by file),
    and return the name. Registering the same spec again is a no-op; another spec under a name
    already taken is refused (``ValueError``), so a file never silently replaces a regime."""
    if not isinstance(spec, RegimeSpec):
        raise ValueError(f"spec must be a RegimeSpec; got {type(spec).__name__}")
    old = REGIMES.get(spec.name)
    if old is not None and old != spec:
        raise ValueError(f"regime {spec.name!r} is already a different regime; rename the "
                         "fitted one (its file's regime name)")
    REGIMES[spec.name] = spec
    return spec.name


#: Drafter variants of a regime (the ``stochastic`` sweep family's ``drafters``): name -> knob
#: overrides of the regime's drafter (:mod:`treespec_sim.synth.drafter`). ``none``: the
#: correction proposal *is* the marginal (DFlash as is); ``corrected``: a first-order
#: (Markov-head-like) correction from the parent; ``strong``: a better correction with
#: mismatch, hard misses, depth degradation and junk halved.
DRAFTER_VARIANTS = {
    "none": {"correction_quality": 0.0},
    "corrected": {"correction_quality": 0.8},
    "strong": {"correction_quality": 0.95, "_halve": ("mismatch", "hard_miss", "degradation",
                                                           "junk")},
}


def drafter_variant(regime: str, drafter: str) -> RegimeSpec:
    """The regime ``regime`` with the knobs of drafter variant ``drafter``.

    Parameters
    ----------
    regime : str
        A name of :data:`REGIMES`.
    drafter : str
        A name of :data:`DRAFTER_VARIANTS`.

    Returns
    -------
    RegimeSpec
        Named ``"<regime>+<drafter>"``; its target knobs are the regime's.
    """
    if drafter not in DRAFTER_VARIANTS:
        raise ValueError(f"unknown drafter {drafter!r}; known drafters: "
                         f"{', '.join(DRAFTER_VARIANTS)}")
    spec = get_regime(regime)
    knobs = dict(DRAFTER_VARIANTS[drafter])
    halve = knobs.pop("_halve", ())
    for name in halve:
        knobs[name] = getattr(spec, name) / 2
    return replace(spec, name=f"{regime}+{drafter}", **knobs)
