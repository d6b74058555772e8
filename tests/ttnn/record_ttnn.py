"""A pytest plugin that records the op library's TT-NN calls while the op library's own tests run on the simulator.

``pytest -p record_ttnn --ttnn-record=OUT.json tests/kernels ...``: every op the tests run through the kernel runner
(``kohakutt.kernels.runner``) is, once per distinct call (IR op, operand specs and scalar values, attributes,
numerics), also given to the op's TT-NN implementation with :class:`fake_ttnn.FakeTTNN` standing in for ``ttnn`` and
fake input tensors of the same specs on the mocked card. The calls it makes are written to OUT.json, one case per
distinct op call, for ``replay_ttnn.py`` to make for real. The simulator still runs every op as usual.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import threading
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_ttnn import DataType, FakeError, FakeTTNN, Layout

MAX_PER_KIND = 40  # distinct calls kept per IR op and operand dtypes (the first ones the tests make)
VALUES_UP_TO = 1024  # integer input tensors this small carry their values (the op library may read them back)


class Recorder:
    def __init__(self) -> None:
        self.fake = FakeTTNN()
        self.cases: list[dict[str, Any]] = []
        self.seen: set[str] = set()
        self.per_op: Counter[str] = Counter()
        self.lock = threading.Lock()

    def record(self, op: str, in_specs: list, values: list, attrs: dict, numerics: Any, out_specs: list,
               seed: tuple[int, int]) -> None:  # fmt: skip
        from kohakutt.errors import KohakuTTUnsupportedOperator
        from kohakutt.ir.ops import TensorSpec
        from kohakutt.kernels import registry
        from kohakutt.kernels.ttnn_io import STORED, card_call, card_shape

        key = repr((op, [str(s) for s in in_specs], [v for v in values if not isinstance(v, np.ndarray)],
                    sorted((k, repr(v)) for k, v in attrs.items()), str(numerics)))  # fmt: skip
        kind = repr((op, [getattr(s, "dtype", None) for s in (*in_specs, *out_specs)]))
        with self.lock:
            if key in self.seen or self.per_op[kind] >= MAX_PER_KIND:
                return
            self.seen.add(key)
            impl = registry.lookup(op, "ttnn", "ttnn")
            if impl is None:
                return
            self.per_op[kind] += 1
            fake = self.fake
            fake.start()
            inputs: list[Any] = []
            for spec, v in zip(in_specs, values):
                if isinstance(spec, TensorSpec):
                    small = isinstance(v, np.ndarray) and v.dtype.kind in "iub" and v.size <= VALUES_UP_TO
                    small = small and card_shape(spec) == tuple(spec.shape)  # not int64's word pairs
                    inputs.append(fake.leaf(card_shape(spec), getattr(DataType, STORED[spec.dtype].upper()),
                                            Layout.TILE if spec.layout.value == "tile" else Layout.ROW_MAJOR,
                                            values=np.array(v) if small else None))  # fmt: skip
                else:
                    inputs.append(v)
            fn = impl.fn
            params = inspect.signature(fn).parameters
            # creation ops take the card's default device (TT-NN's GetDefaultDevice), as the ttnn backend sets it
            extra = {"seed": seed} if "seed" in params else {}
            src = inspect.unwrap(fn)
            case = {
                "op": op,
                "impl": f"{src.__module__}.{src.__qualname__}",
                "impl_source": f"{Path(inspect.getsourcefile(src)).name}:{inspect.getsourcelines(src)[1]}",
                "in_specs": [str(s) for s in in_specs],
                "attrs": {k: repr(v) for k, v in attrs.items()},
                "numerics": str(numerics),
                "out_specs": [
                    {"shape": list(card_shape(s)), "dtype": STORED[s.dtype].upper(), "layout": s.layout.value}
                    for s in out_specs
                ],
                "inputs": [fake.encode(x) for x in inputs],
            }
            try:
                result = card_call(impl, fake, inputs, list(in_specs), dict(attrs), numerics, list(out_specs), **extra)
                case |= {"status": "ok", "returns": fake.encode(result)}
            except KohakuTTUnsupportedOperator as e:
                case |= {"status": "unsupported", "error": str(e)}
            except (FakeError, TypeError, AttributeError, ValueError, IndexError, KeyError, AssertionError) as e:
                tb = traceback.extract_tb(e.__traceback__)
                where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                              if "/kohakutt/kernels/" in f.filename), "?")  # fmt: skip
                case |= {"status": "error", "error": f"{type(e).__name__}: {e}", "where": where}
            case |= {"calls": fake.calls, "tensors": {str(k): v for k, v in fake.tensors.items()}}
            self.cases.append(case)


RECORDER = Recorder()


RECORD_FROM = ("tests/kernels/", "tests/ttnn/test_ttnn_cases.py", "tests/frontends/torch/test_opinfo.py")
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "build" / "ttnn-replay"
# What a recording depends on: the package, the tests it records from, the fake and this recorder.
RECORDING_INPUTS = (
    "kohakutt", "tests/kernels", "tests/conftest.py", "tests/frontends/torch/test_opinfo.py",
    "tests/ttnn/test_ttnn_cases.py", "tests/ttnn/fake_ttnn.py", "tests/ttnn/record_ttnn.py",
)  # fmt: skip


def digest(*parts: Path | bytes) -> str:
    """A short sha256 of files (folders: their ``*.py`` files, with their paths) and bytes."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, bytes):
            h.update(p)
            continue
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:20]


def recording_path() -> Path:
    """Where the recording of the current sources is (or will be) cached."""
    return CACHE / f"recording-{digest(*(REPO / p for p in RECORDING_INPUTS))}.json"


REPLAY_TESTS = "tests/ttnn/test_ttnn_replay.py"
_active = threading.Event()  # set while a test of RECORD_FROM runs (in-session recording only)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ttnn-record", default=None, help="write the op library's recorded TT-NN calls here")


def _install(always: bool) -> None:
    """Wrap the kernel runner's command so that each op, after the simulator ran it, is recorded (``always``, or
    while a test of RECORD_FROM runs)."""
    from kohakutt.kernels import runner
    from kohakutt.kernels.tensor import DeviceTensor, decode

    original = runner._execute

    def _execute(*buffers: Any, impl: Any, in_views: list, out_views: list, in_specs: list, attrs: dict,
                 numerics: Any, out_specs: list, seed: tuple[int, int], **kw: Any) -> None:  # fmt: skip
        if not (always or _active.is_set()):
            return original(*buffers, impl=impl, in_views=in_views, out_views=out_views, in_specs=in_specs,
                            attrs=attrs, numerics=numerics, out_specs=out_specs, seed=seed, **kw)  # fmt: skip
        values = []
        for i, t in in_views:
            if i is not None and isinstance(t, DeviceTensor) and t.spec.numel <= VALUES_UP_TO:
                values.append(decode(runner._rebind(t, buffers[i]), buffers[i].device.backend.host_view(buffers[i])))
            else:
                values.append(None if i is not None else t)
        original(*buffers, impl=impl, in_views=in_views, out_views=out_views, in_specs=in_specs, attrs=attrs,
                 numerics=numerics, out_specs=out_specs, seed=seed, **kw)  # fmt: skip
        try:
            RECORDER.record(impl.op, list(in_specs), values, attrs, numerics, list(out_specs), seed)
        except Exception as e:  # the recording must never change what the tests see
            RECORDER.cases.append({"op": impl.op, "status": "error", "error": f"recorder: {type(e).__name__}: {e}",
                                   "calls": [], "tensors": {}})  # fmt: skip

    runner._execute = _execute


def pytest_configure(config: pytest.Config) -> None:
    config.ttnn_session_recording = False  # type: ignore[attr-defined]
    if config.getoption("--ttnn-record"):
        _install(always=True)


def _path(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """When this session runs the replay tests after every test they record from (``make test``) and the sources
    changed since the last recording, record in this session rather than in a second one: the replay tests go last
    and find the cases in :data:`RECORDER`."""
    if config.getoption("--ttnn-record") or not any(_path(i) == REPLAY_TESTS for i in items):
        return
    items.sort(key=lambda i: _path(i) == REPLAY_TESTS)  # stable: the other tests keep their order
    paths = {_path(i) for i in items}
    if all(any(p.startswith(src) for p in paths) for src in RECORD_FROM) and not recording_path().exists():
        _install(always=False)
        config.ttnn_session_recording = True  # type: ignore[attr-defined]


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.ttnn_session_recording and _path(item).startswith(RECORD_FROM):  # type: ignore[attr-defined]
        _active.set()


def pytest_runtest_teardown(item: pytest.Item) -> None:
    _active.clear()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = session.config.getoption("--ttnn-record")
    if out:
        Path(out).write_text(json.dumps({"cases": RECORDER.cases}))
