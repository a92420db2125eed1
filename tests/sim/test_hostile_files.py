"""Hostile and damaged files: every reader refuses them in one line, within its memory limit.

Two layers, one table of readers:

* **crafted files** (out-of-bounds strides, negative offsets, zero-stride and compressed bombs,
  shapes that disagree with a header, deep nesting, wrong dtypes, ...) run through each
  reader's command line in a subprocess under an address-space limit
  (:data:`ADDRESS_LIMIT`) with the readers' limits lowered to :data:`READ_LIMIT`: each must end
  with exit status 2 and one line on stderr naming the file -- never a signal, a traceback or
  more memory than that;
* **fuzzed files** (each reader's valid file truncated, with bytes flipped, or swapped for another
  reader's file) through each reader's API in this process: each either reads or raises one
  ``ValueError`` naming the file -- no other exception.
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import acceptance, cost, trace
from treespec_sim.files import LIMITS, MAX_TRACE_BYTES, parse_bytes
from treespec_sim.sweep import load_config, main
from treespec_sim.synth.regimes import load_calibrated

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "logs"
SHIPPED_TRACE = ROOT / "real_models" / "traces" / "tiny-b256.npz"
#: The readers' limits in the subprocesses (every ``TREESPEC_MAX_*``).
READ_LIMIT = "64M"
#: The subprocesses' address-space limit: the interpreter with numpy and treespec_sim imported
#: (about 250 MiB of address space) plus the readers' limit, with room to spare -- far below
#: what any bomb here asks for (gigabytes).
ADDRESS_LIMIT = 768 * 2**20


# ----------------------------------------------------------------------------- crafting
class _Global:
    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name


class _Call:
    def __init__(self, fn, *args) -> None:
        self.fn, self.args = fn, args


class _PersistentId:
    def __init__(self, pid: tuple) -> None:
        self.pid = pid


def _encode(x, out: bytearray) -> None:
    """Pickle opcodes for ``x`` (protocol 2), globals written by name: what a crafted
    ``torch.save`` file holds, without torch."""
    if isinstance(x, _Global):
        out += b"c" + x.module.encode() + b"\n" + x.name.encode() + b"\n"
    elif isinstance(x, _Call):
        _encode(x.fn, out)
        _encode(tuple(x.args), out)
        out += b"R"
    elif isinstance(x, _PersistentId):
        _encode(x.pid, out)
        out += b"Q"
    elif isinstance(x, bool):
        out += b"\x88" if x else b"\x89"
    elif isinstance(x, int):
        if -(2**31) <= x < 2**31:
            out += b"J" + struct.pack("<i", x)
        else:
            raw = x.to_bytes((x.bit_length() + 8) // 8, "little", signed=True)
            out += b"\x8a" + bytes([len(raw)]) + raw
    elif isinstance(x, float):
        out += b"G" + struct.pack(">d", x)
    elif isinstance(x, str):
        raw = x.encode()
        out += b"X" + struct.pack("<I", len(raw)) + raw
    elif isinstance(x, tuple):
        out += b"("
        for e in x:
            _encode(e, out)
        out += b"t"
    elif isinstance(x, list):
        out += b"]("
        for e in x:
            _encode(e, out)
        out += b"e"
    elif isinstance(x, dict):
        out += b"}("
        for k, v in x.items():
            _encode(k, out)
            _encode(v, out)
        out += b"u"
    elif x is None:
        out += b"N"
    else:
        raise TypeError(type(x))


def _pickle(x) -> bytes:
    out = bytearray(b"\x80\x02")
    _encode(x, out)
    return bytes(out + b".")


def _tensor(offset, size, stride, *, key="0", numel=4, kind="FloatStorage"):
    storage = _PersistentId(("storage", _Global("torch", kind), key, "cpu", numel))
    return _Call(_Global("torch._utils", "_rebuild_tensor_v2"), storage, offset, tuple(size),
                 tuple(stride), False, _Call(_Global("collections", "OrderedDict")))


def _log_with(tensor) -> dict:
    return {"responses": [{"dflash": _Call(_Global("types", "SimpleNamespace"))}],
            "block_size": 16, "evil": tensor}


def _torch_save(path: Path, obj, storages: dict[str, bytes], *, compress: bool = False,
                pickle_bytes: bytes | None = None) -> Path:
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as z:
        z.writestr("archive/data.pkl", _pickle(obj) if pickle_bytes is None else pickle_bytes)
        for key, raw in storages.items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", "3\n")
    return path


def _zeros_member(z: zipfile.ZipFile, name: str, nbytes: int) -> None:
    """A deflated member of ``nbytes`` zeros, streamed (a compressed bomb)."""
    with z.open(zipfile.ZipInfo(name), "w", force_zip64=True) as f:
        chunk = bytes(1 << 20)
        for _ in range(nbytes >> 20):
            f.write(chunk)


def _npy_header(shape, descr="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                               "shape": tuple(shape)})
    return buf.getvalue()


def _shipped_trace() -> tuple[dict, dict[str, np.ndarray]]:
    header, arrays = trace.read(SHIPPED_TRACE)
    return header, {k: np.array(v) for k, v in arrays.items()}


def _write_npz(path: Path, header: dict, arrays: dict, *, raw: dict[str, bytes] | None = None,
               bomb: tuple[str, int] | None = None) -> Path:
    """A trace-shaped ``.npz`` written member by member (nothing checked: a crafted file)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        blob = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        members = {**({} if "header" in (raw or {}) else {"header": blob}), **arrays}
        for name, a in members.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(a), allow_pickle=True)
            z.writestr(f"{name}.npy", buf.getvalue())
        for name, data in (raw or {}).items():
            z.writestr(f"{name}.npy", data)
        if bomb is not None:  # float32 zeros of the given shape, streamed
            name, shape = bomb
            with z.open(zipfile.ZipInfo(f"{name}.npy", (2026, 1, 1, 0, 0, 0)), "w",
                        force_zip64=True) as f:
                f.write(_npy_header(shape))
                chunk = bytes(1 << 20)
                for _ in range((4 * int(np.prod(shape))) >> 20):
                    f.write(chunk)
    return path


def _trace_variant(path: Path, *, header=None, drop=(), raw=None, bomb=None, **arrays) -> Path:
    h, a = _shipped_trace()
    if header is not None:
        h = header(h)
    for k in drop:
        a.pop(k)
    a.update(arrays)
    return _write_npz(path, h, a, raw=raw, bomb=bomb)


def _with_settings(**kw):
    def change(h):
        return {**h, "settings": {**h["settings"], **kw}}
    return change


# ----------------------------------------------------------------------------- the cases
def _pt_cases(d: Path) -> dict[str, Path]:
    four = np.ones(4, np.float32).tobytes()
    c = {
        # the two files: 4 float32 of storage, size (4096,) stride (2**28,) ...
        "pt-out-of-bounds-stride": _torch_save(d / "oob.pt", _log_with(
            _tensor(0, (4096,), (2**28,))), {"0": four}),
        # ... and size (70000, 70000) stride (0, 0): 18.3 GiB asked of a 16-byte storage
        "pt-zero-stride-bomb": _torch_save(d / "zerostride.pt", _log_with(
            _tensor(0, (70000, 70000), (0, 0))), {"0": four}),
        "pt-negative-offset": _torch_save(d / "negoff.pt", _log_with(
            _tensor(-8, (4,), (1,))), {"0": four}),
        "pt-negative-stride": _torch_save(d / "negstride.pt", _log_with(
            _tensor(3, (4,), (-1,))), {"0": four}),
        "pt-offset-past-storage": _torch_save(d / "offpast.pt", _log_with(
            _tensor(5, (0,), (1,))), {"0": four}),
        "pt-float-size": _torch_save(d / "floatsize.pt", _log_with(
            _tensor(0, (2.5,), (1,))), {"0": four}),
        "pt-size-stride-lengths": _torch_save(d / "ndim.pt", _log_with(
            _tensor(0, (2, 2), (1,))), {"0": four}),
        "pt-storage-shorter-than-declared": _torch_save(d / "short.pt", _log_with(
            _tensor(0, (4,), (1,), numel=2**40)), {"0": four}),
        "pt-unknown-storage-type": _torch_save(d / "dtype.pt", _log_with(
            _tensor(0, (4,), (1,), kind="ComplexFloatStorage")), {"0": four}),
        "pt-missing-storage": _torch_save(d / "nostorage.pt", _log_with(
            _tensor(0, (4,), (1,), key="../../etc/passwd")), {"0": four}),
        "pt-deep-nesting": _torch_save(d / "deep.pt", None, {}, pickle_bytes=(
            b"\x80\x02" + b"]" * 200_000 + b"a" * 199_999 + b".")),
        "pt-truncated-pickle": _torch_save(d / "trunc.pt", None, {},
                                           pickle_bytes=_pickle(_log_with(1))[:-9]),
        "pt-calls-os-system": FIX / "malicious.pt",
        "pt-text-renamed": _text(d / "text.pt", "just some notes\n"),
    }
    # a storage member that inflates to 256 MiB from a few hundred kB (declared 2**26 floats)
    bomb = d / "inflate.pt"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", _pickle(_log_with(_tensor(0, (4,), (1,),
                                                                 numel=2**26))))
        _zeros_member(z, "archive/data/0", 2**28)
    c["pt-compressed-storage-bomb"] = bomb
    shipped = (FIX / "ddtree_benchmark.pt").read_bytes()
    c["pt-truncated-zip"] = _bytes(d / "cut.pt", shipped[: len(shipped) // 2])
    return c


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _jsonl_cases(d: Path) -> dict[str, Path]:
    return {
        "jsonl-line-too-long": _text(d / "long.jsonl", '{"accept_lengths": [' + "1, " * 40_000_000
                                     + '1]}\n'),
        "jsonl-deep-nesting": _text(d / "deep.jsonl", '{"accept_lengths": ' + "[" * 100_000
                                    + "]" * 100_000 + "}\n"),
        "jsonl-not-utf8": _bytes(d / "latin.jsonl", b'{"accept_lengths": [1, 2], "x": "\xff"}\n'),
        "jsonl-lengths-a-number": _text(d / "num.jsonl", '{"accept_lengths": 5}\n'),
        "jsonl-lengths-a-dict": _text(d / "dict.jsonl", '{"accept_lengths": {"a": 1}}\n'),
        "jsonl-temperature-a-list": _text(d / "temp.jsonl",
                                          '{"accept_lengths": [1, 2], "temperature": [1]}\n'),
        "jsonl-huge-integer": _text(d / "bigint.jsonl", '{"accept_lengths": [1' + "0" * 400
                                    + "]}\n"),
    }


_VLLM_LINE = ("INFO 12-01 10:00:05 [metrics.py:120] SpecDecoding metrics: Mean acceptance "
              "length: 2.61, Accepted: 7667 tokens, Drafted: 14322 tokens, Per-position "
              "acceptance rate: ")
_PROM_DRAFTS = 'vllm:spec_decode_num_drafts_total{engine="0"} 100.0\n'


def _wide_requests(width: int, requests: int) -> str:
    """vLLM per-request JSON lines that state ``num_spec_tokens = width``: one request whose
    round accepted every draft, then ``requests`` of one round each (a units x lengths table
    of ``requests x width`` floats from a few MB of text)."""
    def line(hist: list[int]) -> str:
        acc = sum(j * c for j, c in enumerate(hist))
        return json.dumps({"metrics": {"speculative_decoding": {
            "acceptance_histogram": hist, "num_spec_steps": sum(hist),
            "num_accepted_draft_tokens": acc, "num_spec_tokens": width}}}) + "\n"
    return line([0] * width + [1]) + line([1]) * requests


def _engine_cases(d: Path) -> dict[str, Path]:
    return {
        "engine-vllm-line-too-long": _text(d / "long.log", _VLLM_LINE + "0.5, " * 14_000_000
                                           + "0.5\n"),
        "engine-vllm-not-utf8": _bytes(d / "latin.log", _VLLM_LINE.encode() + b"0.9\xff\n"),
        "engine-vllm-rate-overflows": _text(d / "inf.log", _VLLM_LINE + "1e999, 0.5\n"),
        "engine-vllm-rate-nan": _text(d / "nan.log", _VLLM_LINE + "nan, 0.5\n"),
        "engine-prom-binary": _bytes(d / "bin.prom", bytes(range(256)) * 8),
        # one counter at position 10**12: the positions between are never enumerated
        "engine-prom-huge-position": _text(d / "pos.prom", _PROM_DRAFTS
                                           + 'vllm:spec_decode_num_accepted_tokens_per_pos_total'
                                             '{engine="0",position="1000000000000"} 5.0\n'),
        "engine-prom-huge-count": _text(d / "count.prom", _PROM_DRAFTS.replace(
            "100.0", "1" + "0" * 400)),
        "engine-request-wide-table": _text(d / "wide.jsonl", _wide_requests(200_000, 20_000)),
        "engine-request-huge-histogram-entry": _text(
            d / "bigint.jsonl", '{"metrics": {"speculative_decoding": {"acceptance_histogram": '
            '[1, 1' + "0" * 400 + '], "num_spec_steps": 2, "num_accepted_draft_tokens": 1}}}\n'),
        "engine-sglang-deep-nesting": _text(d / "deep.json", '{"meta_info": ' + "[" * 100_000
                                            + "]" * 100_000 + "}"),
        "engine-sglang-histogram-a-string": _text(d / "str.json", json.dumps(
            {"meta_info": {"spec_verify_ct": 3, "spec_accept_histogram": "0,1,2"}})),
        "engine-aiperf-huge-key": _text(d / "key.jsonl", json.dumps(
            {"spec_decode_acceptance": {"acceptance_histogram": {str(10**12): 1},
                                        "num_spec_steps": 1, "num_accepted_draft_tokens": 10**12,
                                        "num_spec_tokens": 5}}) + "\n"),
        "engine-spec-bench-huge-integer": _text(d / "sb.jsonl", '{"choices": [{"accept_lengths": '
                                                '[1' + "0" * 400 + "]}]}\n"),
    }


def _trace_cases(d: Path) -> dict[str, Path]:
    h, a = _shipped_trace()
    R, N = a["tree_parent"].shape
    raw = SHIPPED_TRACE.read_bytes()
    flipped = bytearray(raw)
    rng = np.random.default_rng(49)
    for i in rng.choice(np.arange(1000, len(raw) - 1000), 64, replace=False):
        flipped[i] ^= 0xFF
    return {
        "trace-truncated": _bytes(d / "cut.npz", raw[: 2 * 2**20]),
        "trace-64-flipped-bytes": _bytes(d / "flip.npz", bytes(flipped)),
        "trace-text-renamed": _text(d / "notes.npz", "header,values\n1,2\n"),
        # a member whose header declares 24 x 7 x 10**9 floats (the file is a few kB)
        "trace-shape-beyond-header": _trace_variant(
            d / "shape.npz", drop=("log_q",),
            raw={"log_q": _npy_header((R, 7, 10**9)) + b"\0" * 64}),
        # the header itself claims V = 10**9: consistent, and far above the limit
        "trace-header-claims-huge": _trace_variant(
            d / "huge.npz", header=lambda h: {**h, "V": 10**9}, drop=("log_q",),
            raw={"log_q": _npy_header((R, 7, 10**9)) + b"\0" * 64}),
        # 256 MiB of zeros deflated to a few hundred kB, justified by a header with V = 2**24
        "trace-compressed-bomb": _trace_variant(
            d / "bomb.npz", header=lambda h: {**h, "V": 2**24}, drop=("s_laws",),
            bomb=("s_laws", (4, 2**24))),
        "trace-object-dtype": _trace_variant(
            d / "obj.npz", tree_parent=np.array([[None] * N] * R, dtype=object)),
        "trace-float-parents": _trace_variant(d / "float.npz",
                                              tree_parent=a["tree_parent"].astype(np.float64)),
        "trace-string-tokens": _trace_variant(d / "str.npz",
                                              tree_token=a["tree_token"].astype("U8")),
        "trace-unknown-array": _trace_variant(d / "extra.npz", extra=np.zeros(3)),
        "trace-offsets-past-tokens": _trace_variant(
            d / "offsets.npz", ctx_offsets=a["ctx_offsets"] + 10**6),
        "trace-token-outside-vocab": _trace_variant(
            d / "vocab.npz", tree_token=np.where(a["tree_token"] > 0, 10**6, a["tree_token"])),
        "trace-law-index-outside": _trace_variant(d / "laws.npz",
                                                  s_row_of=a["s_row_of"] + 10**4),
        "trace-tree-size-outside": _trace_variant(d / "size.npz",
                                                  tree_size=a["tree_size"] + 10**4),
        "trace-header-deep-json": _write_npz(d / "deephdr.npz", {}, {}, raw={
            "header": _npy_header((200_000,), "|u1") + b"[" * 100_000 + b"]" * 100_000}),
        "trace-header-bad-b-max": _trace_variant(d / "bmax.npz",
                                                 header=_with_settings(b_max="256")),
        "trace-header-bad-scheme": _trace_variant(d / "scheme.npz", header=_with_settings(
            sampled={**h["settings"]["sampled"], "scheme": "nonsense"})),
        "trace-header-not-object": _write_npz(d / "list.npz", [1, 2, 3], {}),
    }


def _latency_cases(d: Path) -> dict[str, Path]:
    good = json.loads((ROOT / "real_models" / "profiles" / "cpu_tiny.json").read_text())
    return {
        "latency-deep-nesting": _text(d / "deep.json", "[" * 100_000 + "]" * 100_000),
        "latency-a-list": _text(d / "list.json", "[1, 2, 3]"),
        "latency-binary": _bytes(d / "bin.json", bytes(range(256)) * 8),
        "latency-wrong-types": _text(d / "types.json", json.dumps(
            {**good, "node_counts": "many"})),
        "latency-over-limit": _text(d / "big.json", json.dumps(
            {**good, "pad": "x" * (65 * 2**20)})),
    }


def _config_cases(d: Path) -> dict[str, Path]:
    return {
        "config-deep-nesting": _text(d / "deep.toml", "a = " + "[" * 50_000 + "]" * 50_000 + "\n"),
        "config-binary": _bytes(d / "bin.toml", bytes(range(256)) * 8),
        "config-over-limit": _text(d / "big.toml", "# " + "x" * (65 * 2**20) + "\n"),
        "config-wrong-types": _text(d / "types.toml", '[ddtree]\nbudgets = "lots"\n'),
    }


def _calibration_cases(d: Path) -> dict[str, Path]:
    return {
        "calibration-deep-nesting": _text(d / "deep.json", '{"regimes": ' + "[" * 100_000
                                          + "]" * 100_000 + "}"),
        "calibration-bad-knobs": _text(d / "knobs.json", json.dumps(
            {"regimes": {"x": {"knobs": {"name": "x", "vocab_size": "big"}}}})),
        "calibration-no-regimes": _text(d / "none.json", json.dumps({"regimes": [1]})),
    }


#: reader -> (cases, command line of the file, the API call that reads it)
def _cli(reader: str, path: Path, out: Path) -> list[str]:
    py = [sys.executable, "-m"]
    if reader in ("pt", "jsonl", "engine"):
        return [*py, "treespec_sim.acceptance", "show", str(path)]
    if reader == "trace":
        return [*py, "treespec_sim.sweep", "--trace", str(path), "--out", str(out)]
    if reader == "latency":
        return [*py, "treespec_sim.sweep", "--preset", "quick", "--cost-model", str(path),
                "--out", str(out)]
    if reader == "config":
        return [*py, "treespec_sim.sweep", "--config", str(path), "--out", str(out)]
    if reader == "calibration":
        return [*py, "treespec_sim.calibrate", "--table", "--file", str(path)]
    raise AssertionError(reader)


_CASES = {"pt": _pt_cases, "jsonl": _jsonl_cases, "engine": _engine_cases,
          "trace": _trace_cases,
          "latency": _latency_cases, "config": _config_cases,
          "calibration": _calibration_cases}


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> dict[str, tuple[str, Path]]:
    out = {}
    for reader, make in _CASES.items():
        d = tmp_path_factory.mktemp(reader)
        out.update({name: (reader, path) for name, path in make(d).items()})
    return out


_NAMES = [(reader, name) for reader, make in [
    ("pt", ["pt-out-of-bounds-stride", "pt-zero-stride-bomb", "pt-negative-offset",
            "pt-negative-stride", "pt-offset-past-storage", "pt-float-size",
            "pt-size-stride-lengths", "pt-storage-shorter-than-declared",
            "pt-unknown-storage-type", "pt-missing-storage", "pt-deep-nesting",
            "pt-truncated-pickle", "pt-calls-os-system", "pt-text-renamed",
            "pt-compressed-storage-bomb", "pt-truncated-zip"]),
    ("jsonl", ["jsonl-line-too-long", "jsonl-deep-nesting", "jsonl-not-utf8",
               "jsonl-lengths-a-number", "jsonl-lengths-a-dict", "jsonl-temperature-a-list",
               "jsonl-huge-integer"]),
    ("engine", ["engine-vllm-line-too-long", "engine-vllm-not-utf8",
                "engine-vllm-rate-overflows", "engine-vllm-rate-nan", "engine-prom-binary",
                "engine-prom-huge-position", "engine-prom-huge-count",
                "engine-request-wide-table", "engine-request-huge-histogram-entry",
                "engine-sglang-deep-nesting", "engine-sglang-histogram-a-string",
                "engine-aiperf-huge-key", "engine-spec-bench-huge-integer"]),
    ("trace", ["trace-truncated", "trace-64-flipped-bytes", "trace-text-renamed",
               "trace-shape-beyond-header", "trace-header-claims-huge", "trace-compressed-bomb",
               "trace-object-dtype", "trace-float-parents", "trace-string-tokens",
               "trace-unknown-array", "trace-offsets-past-tokens", "trace-token-outside-vocab",
               "trace-law-index-outside", "trace-tree-size-outside", "trace-header-deep-json",
               "trace-header-bad-b-max", "trace-header-bad-scheme", "trace-header-not-object"]),
    ("latency", ["latency-deep-nesting", "latency-a-list", "latency-binary",
                 "latency-wrong-types", "latency-over-limit"]),
    ("config", ["config-deep-nesting", "config-binary", "config-over-limit",
                "config-wrong-types"]),
    ("calibration", ["calibration-deep-nesting", "calibration-bad-knobs",
                     "calibration-no-regimes"]),
] for name in make]


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (120, 120))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def test_the_case_table_names_every_crafted_file(crafted):
    assert sorted(name for _, name in _NAMES) == sorted(crafted)


@pytest.mark.parametrize(("reader", "name"), _NAMES, ids=[n for _, n in _NAMES])
def test_a_crafted_file_is_refused_in_one_line_within_the_memory_limit(crafted, reader, name,
                                                                         tmp_path):
    _, path = crafted[name]
    out = tmp_path / "out"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           **{lim.env: READ_LIMIT for lim in LIMITS}}
    res = subprocess.run(_cli(reader, path, out), capture_output=True, text=True, env=env,
                         preexec_fn=_limited, timeout=300, cwd=ROOT)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert str(path) in lines[0], lines[0]
    assert not out.exists(), "a refused input wrote its output folder"


def test_the_bombs_are_refused_for_their_size_not_for_running_out_of_memory(crafted,
                                                                            monkeypatch):
    """In this process, with the default limits: the refusal names the limit and how to raise
    it, before anything of the size was allocated."""
    for name in ("pt-zero-stride-bomb", "pt-compressed-storage-bomb"):
        monkeypatch.setenv("TREESPEC_MAX_LOG_BYTES", "64M")
        with pytest.raises(ValueError, match="TREESPEC_MAX_LOG_BYTES raises it"):
            acceptance.read_logs(crafted[name][1])
    # a units x lengths table many times the text that states it (one wide request, many
    # narrow ones)
    with pytest.raises(ValueError, match=r"its table of 20001 requests x 200001 lengths would "
                                         r"take 29\.8 GiB.*set TREESPEC_MAX_LOG_BYTES to raise it"):
        acceptance.read_logs(crafted["engine-request-wide-table"][1])
    monkeypatch.setenv("TREESPEC_MAX_TRACE_BYTES", "64M")
    for name in ("trace-header-claims-huge", "trace-compressed-bomb"):
        with pytest.raises(ValueError, match="set TREESPEC_MAX_TRACE_BYTES to raise it"):
            trace.load(crafted[name][1])
    monkeypatch.setenv("TREESPEC_MAX_TRACE_BYTES", "1G")  # the header justifies the bomb
    with pytest.raises(ValueError, match="header justifies at most"):
        trace.load(crafted["trace-shape-beyond-header"][1])


def test_a_raised_limit_reads_a_file_the_default_refuses(tmp_path, monkeypatch):
    monkeypatch.setenv("TREESPEC_MAX_TRACE_BYTES", "1M")
    with pytest.raises(ValueError, match=r"above the 1\.0 MiB allowed"):
        trace.load(SHIPPED_TRACE)
    monkeypatch.setenv("TREESPEC_MAX_TRACE_BYTES", "8M")
    assert len(trace.load(SHIPPED_TRACE)) == 24
    monkeypatch.setenv("TREESPEC_MAX_TRACE_BYTES", "lots")
    with pytest.raises(ValueError, match="TREESPEC_MAX_TRACE_BYTES: 'lots' is not a size"):
        trace.load(SHIPPED_TRACE)


@pytest.mark.parametrize(("text", "expected"), [("4096", 4096), ("512M", 512 * 2**20),
                                                ("8G", 8 * 2**30), ("1.5k", 1536),
                                                ("2GiB", 2 * 2**30), ("16gb", 16 * 2**30)])
def test_sizes_parse_in_binary_units(text, expected):
    assert parse_bytes(text, "x") == expected


def test_the_documented_limits_are_the_code_s():
    page = (ROOT / "docs" / "traces.md").read_text()
    for lim in LIMITS:
        assert lim.env in page, lim.env
    assert MAX_TRACE_BYTES.default == 16 * 2**30 and "16 GiB" in page


# ----------------------------------------------------------------------------- fuzzing
def _calibration_read(path):
    return load_calibrated(path)


#: reader -> (a valid file, the API call)
_READERS = {
    "pt": (FIX / "ddtree_benchmark.pt", acceptance.read_logs),
    "jsonl": (FIX / "jetspec_accum_logp.jsonl", acceptance.read_logs),
    **{name: (FIX / file, acceptance.read_logs) for name, file in {
        "vllm-log": "vllm_metrics.log", "vllm-prometheus": "vllm_metrics.prom",
        "vllm-request": "vllm_requests.jsonl", "sglang-meta": "sglang_meta_info.json",
        "sglang-generate": "sglang_generate.jsonl", "sglang-openai": "sglang_openai.jsonl",
        "sglang-log": "sglang_server.log", "spec-bench": "spec_bench.jsonl",
        "aiperf": "aiperf_profile_export.jsonl"}.items()},
    "trace": (SHIPPED_TRACE, trace.load),
    "latency": (ROOT / "real_models" / "profiles" / "cpu_tiny.json", cost.load_cost_model),
    "config": (ROOT / "docs" / "results" / "verifiers.toml", load_config),
    "calibration": (ROOT / "treespec_sim" / "data" / "calibration.json", _calibration_read),
}


def _variants(data: bytes, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    n = len(data)
    out = [(f"truncated-{f}", data[: int(n * f)]) for f in (0.0, 0.1, 0.5, 0.9, 0.999)]
    out.append(("truncated-1", data[:-1]))
    for k in (1, 8, 64):
        for rep in range(3):
            b = bytearray(data)
            for i in rng.choice(n, min(k, n), replace=False):
                b[i] ^= int(rng.integers(1, 256))
            out.append((f"flip{k}-{rep}", bytes(b)))
    return out


#: The acceptance-log readers: their format is detected from the content, not the name.
_LOGS = [r for r, (_, read) in _READERS.items() if read is acceptance.read_logs]


def _fuzz_cases(reader: str) -> list[tuple[str, bytes]]:
    """Truncations, byte flips, and every other reader's file under this one's name (an
    acceptance log: every other file, whatever its suffix)."""
    good, _ = _READERS[reader]
    rng = np.random.default_rng(20261203)
    cases = _variants(good.read_bytes(), rng)
    cases += [(f"swapped-{other}", path.read_bytes()) for other, (path, _) in _READERS.items()
              if other != reader and (path.suffix != good.suffix or reader in _LOGS)]
    return cases


@pytest.mark.parametrize("reader", list(_READERS))
def test_fuzzed_files_read_or_are_refused_naming_the_file(reader, tmp_path):
    good, read = _READERS[reader]
    read(good)  # the valid file reads
    for label, data in _fuzz_cases(reader):
        path = tmp_path / f"{label}{good.suffix}"
        path.write_bytes(data)
        try:
            read(path)
        except ValueError as exc:
            assert str(path) in str(exc) or path.name in str(exc), (label, str(exc))
            assert "\n" not in str(exc).strip(), (label, str(exc))
        except Exception as exc:  # the assertion is that none gets here
            pytest.fail(f"{reader} {label}: {type(exc).__name__}: {exc}")


def test_a_corrupt_trace_in_a_sweep_writes_nothing(tmp_path, crafted):
    for name in ("trace-truncated", "trace-64-flipped-bytes"):
        out = tmp_path / name
        assert main(["--trace", str(crafted[name][1]), "--out", str(out)]) == 2
        assert not out.exists()


@pytest.mark.parametrize("reader", _LOGS)
def test_fuzzed_logs_exit_0_or_2_with_one_line_from_the_command_line(reader, tmp_path, capsys):
    """``python -m treespec_sim.acceptance show`` on every fuzzed log (in this process): it
    shows the file (status 0) or refuses it with status 2 and one line naming it."""
    good, _ = _READERS[reader]
    assert acceptance.main(["show", str(good)]) == 0
    capsys.readouterr()
    refused = 0
    for label, data in _fuzz_cases(reader):
        path = tmp_path / f"{label}{good.suffix}"
        path.write_bytes(data)
        rc = acceptance.main(["show", str(path)])
        err = capsys.readouterr().err.strip()
        assert rc in (0, 2), (label, rc, err)
        if rc == 2:
            refused += 1
            assert len(err.splitlines()) == 1 and str(path) in err, (label, err)
            assert "Traceback" not in err, (label, err)
        else:
            assert not err, (label, err)
    assert refused >= 1  # at least the empty file
