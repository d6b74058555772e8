"""What ``torch.compile`` traces with is what the card returns: fake (meta) outputs equal real tt outputs.

``torch.compile`` builds its graphs from each op's shape function run on fake tensors, so a tt kernel whose output
strides, sizes, storage offset, dtype or aliasing differ from its shape function's breaks compiled code (a ``view``
the fake strides allow fails on the real tensor; a needed ``.contiguous()`` is dropped), and a tt kernel that cannot
run on fake tensors cannot be traced at all. The sweep (``meta_check``) runs PyTorch's OpInfo samples on tt in four
layouts (contiguous, permuted, strided, channels-last) and six forms (functional, in-place, ``out=``, ``out=`` to
resize, gradients of every input, of the first only) and compares every call that reaches a tt kernel with the same
call on fake tensors; the fast subset runs here, the whole under ``make conformance`` (it writes
``docs/reference/meta_conformance.json``).

``TORCH_OWN`` lists the differences that are PyTorch's own: its fake kernel disagrees with its CPU kernel the same
way, and tt does what the CPU does. :func:`test_torch_own_differences_are_the_cpus_too` shows each on the CPU, so the
list goes stale loudly when PyTorch fixes one.
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from pathlib import Path

import meta_check as mc
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from kohakutt.frontends.torch import compile as ktt_compile

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (pip install -e '.[dev]')")
import test_opinfo as opinfo

DEV = torch.device("tt", 0)
RECORD = Path(__file__).resolve().parents[3] / "docs" / "reference" / "meta_conformance.json"

# (op, kind, form) -> why it is PyTorch's and not tt's ("*" matches any form)
TORCH_OWN: dict[tuple[str, str, str], str] = {
    ("*", "size-1 strides", "*"): "strides of dims of size one address no element: PyTorch's own cross-check "
    "(compare_tensor_meta) ignores them too, and its view shape function and its C++ view disagree on them",
    ("sort.values", "strides", "out"): "PyTorch's fake sort.values restrides an out= tensor of the right shape that "
    "is not contiguous; its CPU kernel (and tt) write into it as it is",
    ("sort.values_stable", "strides", "out"): "the same (stable=True)",
    ("sample:sort", "strides", "out"): "the same (sort with out=)",
    ("sample:msort", "strides", "out"): "the same (msort with out=)",
    ("slice_scatter.out", "aliasing", "out"): "inside another dispatch mode, PyTorch's fake slice_scatter.out returns "
    "self instead of out (only the check's own nesting: traced graphs hold no out= forms)",
    ("slice_scatter.out", "aliasing", "out-resize"): "the same",
    ("sample:slice_scatter", "strides", "out-resize"): "the same: tt's out= takes its layout from that shape "
    "function, so inside the check's mode an out= to resize is laid out as self",
}  # fmt: skip

# the fast subset: OpInfos whose tt kernels choose their own output layout, and a spread of the rest
FAST = (
    "nn.functional.scaled_dot_product_attention", "nn.functional.rms_norm", "nn.functional.batch_norm",
    "_native_batch_norm_legit", "nn.functional.layer_norm", "nn.functional.group_norm", "resize_as_",
    "nn.functional.conv2d", "nn.functional.embedding", "softmax", "log_softmax", "sort", "topk", "cumsum",
    "add", "mul", "where", "sum", "mean", "amax", "max.reduction_with_dim", "mm", "bmm", "addmm", "matmul",
    "cat", "stack", "transpose", "permute", "expand", "narrow", "index_select", "gather", "scatter_add",
    "clone", "contiguous", "to", "nn.functional.gelu", "nn.functional.dropout", "nn.functional.cross_entropy",
    "nn.functional.pad.constant", "nn.functional.max_pool2d", "var_mean", "slice_scatter",
)  # fmt: skip


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    ktt_compile.stats.clear()
    yield
    torch._dynamo.reset()


def dtypes(op) -> list[torch.dtype]:
    """float32 and bfloat16 where the op takes them, and an integer dtype (int64, else int32) where it takes one."""
    supported = op.supported_dtypes("cpu")
    picked = [d for d in (torch.float32, torch.bfloat16) if d in supported]
    picked += [d for d in (torch.int64, torch.int32) if d in supported][:1]
    return picked


def forms(op, sample, dtype: torch.dtype, layout: str) -> list[str]:
    out = []
    if op.inplace_variant is not None:
        out.append("inplace")
    if op.supports_out:
        out += ["out", "out-resize"]
    if op.supports_autograd and dtype.is_floating_point and layout != "strided":
        out.append("grad")
        if len(mc.float_leaves((sample.input, sample.args, sample.kwargs))) > 1:
            out.append("grad-input")  # the others frozen
    return out


def sweep(ops: list, limit: int | None) -> tuple[mc.Report, int]:
    """Every sample (up to ``limit`` per dtype) of ``ops`` in every layout and form; the report and the runs made."""
    report, runs = mc.Report(), 0
    for op in ops:
        name = opinfo.full_name(op)
        for dtype in dtypes(op):
            try:
                todo = opinfo.samples(op, dtype, limit)
            except Exception:
                continue
            for i, s in enumerate(todo):
                for layout in (lay for lay in mc.LAYOUTS if mc.applies(lay, s)):
                    where = f"{name} {dtype} #{i} {layout}"
                    rep, real = mc.check_sample(op, s, layout, where + " functional")
                    runs += 1
                    if rep is None:
                        continue
                    report.merge(rep)
                    for form in forms(op, s, dtype, layout):
                        rep, _ = mc.check_sample(op, s, layout, f"{where} {form}", form=form, like=real)
                        runs += 1
                        if rep is not None:
                            report.merge(rep)
    return report, runs


def unexplained(report: mc.Report) -> list[mc.Mismatch]:
    def own(m: mc.Mismatch) -> bool:
        form = m.where.rsplit(" ", 1)[-1]
        return any(k in TORCH_OWN for k in ((m.op, m.kind, form), (m.op, m.kind, "*"), ("*", m.kind, "*")))

    return [m for m in report.mismatches if not own(m)]


def _show(found: list[mc.Mismatch]) -> str:
    return "\n".join(str(m) for m in found[:30])


# ---------------------------------------------------------------------------------------------------------- sweep
def test_fast_names_exist():
    missing = [n for n in FAST if n not in opinfo.BY_NAME]
    assert not missing, f"FAST names OpInfos op_db does not have: {missing}"


@pytest.mark.parametrize("name", FAST)
def test_fake_outputs_equal_real_ones(name):
    report, _ = sweep([opinfo.BY_NAME[name]], limit=1)
    assert report.checked or report.samples, f"{name}: nothing was compared"
    found = unexplained(report)
    assert not found, _show(found)


def test_the_sweep_finds_a_kernel_that_ignores_its_shape_function(monkeypatch):
    """The check can fail: SDPA's output allocated contiguous again (as before the fix) is found."""
    from kohakutt.frontends.torch.aten import nn as tt_nn

    monkeypatch.setattr(tt_nn, "_query_layout", lambda q, dv: None)
    report, _ = sweep([opinfo.BY_NAME["nn.functional.scaled_dot_product_attention"]], limit=1)
    kinds = {(m.op, m.kind) for m in unexplained(report)}
    assert ("_scaled_dot_product_fused_attention_overrideable", "strides") in kinds


def test_compare_outputs_sees_strides_offsets_dtypes_and_aliasing():
    base = torch.zeros(4, 6)
    fake_mode = FakeTensorMode()
    with fake_mode:
        fbase = fake_mode.from_tensor(base)
        f_t, f_slice = fbase.t(), fbase[1:]
    kinds = lambda found: {m.kind for m in found}  # noqa: E731
    assert kinds(mc.compare_outputs("x", base.t().contiguous(), f_t, [], [], "")) == {"strides"}
    assert kinds(mc.compare_outputs("x", base[1:].clone(), f_slice, [], [], "")) == {"storage offset"}
    assert kinds(mc.compare_outputs("x", base.int(), fbase, [], [], "")) == {"dtype"}
    with fake_mode:
        aliased = fbase.view(6, 4)
    fresh = base.clone().view(6, 4)
    assert kinds(mc.compare_outputs("x", fresh, aliased, [base], [fbase], "")) == {"aliasing"}


def test_torch_own_differences_are_the_cpus_too():
    """Each TORCH_OWN entry, shown on the CPU: PyTorch's fake kernel and its CPU kernel disagree the same way."""
    fake_mode = FakeTensorMode()
    # view: a dim of size one gets another stride
    x = torch.randn(2, 3, 3, 1).permute(3, 0, 1, 2)  # (1, 2, 3, 3)
    with fake_mode:
        f = fake_mode.from_tensor(x).view(1, 2, 9)
    cpu = x.view(1, 2, 9)
    assert cpu.stride() != f.stride() and cpu.stride()[1:] == f.stride()[1:]
    # sort.values into a non-contiguous out of the right shape
    src = torch.randn(6)
    vals, idx = torch.zeros(12)[::2], torch.empty(6, dtype=torch.long)
    torch.sort(src, out=(vals, idx))
    with fake_mode:
        fvals = fake_mode.from_tensor(torch.zeros(12))[::2]
        torch.sort(fake_mode.from_tensor(src), out=(fvals, fake_mode.from_tensor(idx)))
    assert vals.stride() == (2,) and fvals.stride() == (1,)

    # slice_scatter.out inside another dispatch mode: the fake returns self
    class Nested(torch.utils._python_dispatch.TorchDispatchMode):
        seen: list[bool] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.slice_scatter.out:
                mode = FakeTensorMode()
                with mode:
                    fa = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
                    fo = mode.from_tensor(kwargs["out"])
                    self.seen.append(func(*fa, out=fo) is fo)
            return func(*args, **(kwargs or {}))

    out = torch.empty(4, 4)
    with Nested():
        res = torch.slice_scatter(torch.zeros(4, 4), torch.ones(4, 4), 0, 0, 4, 1, out=out)
    assert res is out and Nested.seen == [False]


@pytest.mark.conformance
def test_full_meta_sweep_writes_its_record(request):
    if "conformance" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the full sweep takes many minutes: run it with make conformance (pytest -m conformance)")
    t0 = time.perf_counter()
    ops = opinfo.reaching_core(list(opinfo.op_db))
    ops += [opinfo.BY_NAME[n] for n in (*opinfo.EXTRA_NAMES, *FAST) if opinfo.BY_NAME[n] not in ops]
    report, runs = sweep(ops, limit=None)
    found = unexplained(report)
    kinds = Counter(f"{m.op}: {m.kind}" for m in report.mismatches)
    record = {
        "torch": torch.__version__.split("+")[0],
        "seconds": round(time.perf_counter() - t0, 1),
        "opinfos": len(ops),
        "runs": runs,
        "overloads_checked": len(report.checked),
        "calls_checked": sum(report.checked.values()),
        "samples_checked": sum(report.samples.values()),
        "no_fake_kernel": dict(sorted(report.no_fake.items())),
        "data_dependent": dict(sorted(report.data_dependent.items())),
        "torch_own": dict(sorted(kinds.items())),
        "unexplained": [str(m) for m in found[:50]],
    }
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    assert len(set(report.checked) & mc.registered()) > 250, "the sweep reached too few tt kernels"
    assert not found, _show(found)


# ------------------------------------------------------------------------------------------------ the SDPA case
@pytest.fixture
def fused_attention():
    """float32 attention on the card's fused kernel (TF32 operands): under PyTorch's default "highest" precision it
    takes the math path, whose layouts are its decomposition's; bfloat16 always takes the fused kernel."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision(before)


class Attention(nn.Module):
    """Hugging Face's attention (GPT-2, Llama, Qwen2 with attn_implementation="sdpa"): projections viewed as heads
    and transposed, SDPA, transposed back, made contiguous and reshaped."""

    def __init__(self, dim: int = 64, heads: int = 4, kv_heads: int = 4) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, kv_heads * self.hd)
        self.v = nn.Linear(dim, kv_heads * self.hd)
        self.o = nn.Linear(dim, dim)
        self.norm = nn.RMSNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        if self.kv_heads != self.heads:  # Llama's repeat_kv
            n = self.heads // self.kv_heads
            k = k[:, :, None].expand(b, self.kv_heads, n, t, self.hd).reshape(b, self.heads, t, self.hd)
            v = v[:, :, None].expand(b, self.kv_heads, n, t, self.hd).reshape(b, self.heads, t, self.hd)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        y = y.transpose(1, 2).contiguous().reshape(b, t, -1)
        return x + self.o(y)


@pytest.mark.parametrize("case", ["mask", "gqa"])  # gqa is causal
def test_hf_style_attention_compiles_with_aot_autograd(case, fused_attention):
    torch.manual_seed(0)
    model = Attention(kv_heads=2 if case == "gqa" else 4).to(DEV)
    twin = Attention(kv_heads=2 if case == "gqa" else 4).to(DEV)
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="ktt_tt_aot")
    mask = None
    if case == "mask":  # HF's 4-d additive mask: causal, with one padded key
        m = torch.full((8, 8), float("-inf")).triu(1)
        m[:, 0] = float("-inf")
        m[0, 0] = 0.0
        mask = m.expand(2, 1, 8, 8).to(DEV)
    for step in range(3):  # op by op, then captured, then replayed
        x = torch.randn(2, 8, 64).to(DEV)
        got, want = compiled(x, mask), twin(x, mask)
        assert torch.equal(got.cpu(), want.cpu()), f"step {step}: compiled forward differs from eager"
        got.square().mean().backward()
        want.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-6), f"{name}: gradient differs"
    assert ktt_compile.stats["replays"] >= 2


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_hugging_face_causal_lm_trains_under_aot_compile(family, fused_attention):
    """A tiny Hugging Face model with attn_implementation="sdpa" under ``torch.compile(backend="ktt_tt_aot")``: its
    losses and gradients equal eager mode's on tt, through the captured and replayed steps."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=3, pad_token_id=0,
            attn_implementation="sdpa",
        )  # fmt: skip
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(
            vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=3,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa",
        )  # fmt: skip
        model = transformers.GPT2LMHeadModel(config)
    model = model.to(DEV).train()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="ktt_tt_aot")
    for step in range(3):
        ids = torch.randint(4, 64, (2, 10)).to(DEV)
        got, want = compiled(ids, labels=ids).loss, twin(ids, labels=ids).loss
        assert torch.equal(got.cpu(), want.cpu()), f"step {step}: compiled loss differs from eager"
        got.backward()
        want.backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(p.grad.cpu(), q.grad.cpu()), f"{name}: gradient differs from eager"
    assert ktt_compile.stats["replays"] >= 2


def test_sdpa_in_a_transposed_layout_matches_the_cpu(fused_attention):
    """SDPA's output keeps the query's layout and its gradients their inputs' layouts (the shape functions'), with
    the values the CPU computes."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 6, 3, 16) for _ in range(3))  # (B, S, H, D), viewed as (B, H, S, D)
    cpu = [t.transpose(1, 2).requires_grad_() for t in (q.clone(), k.clone(), v.clone())]
    tt = [t.to(DEV).transpose(1, 2).requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*cpu, is_causal=True)
    got = F.scaled_dot_product_attention(*tt, is_causal=True)
    with FakeTensorMode() as fake_mode:
        meta = F.scaled_dot_product_attention(*[fake_mode.from_tensor(t) for t in tt], is_causal=True)
    assert got.stride() == meta.stride() and got.transpose(1, 2).is_contiguous()
    dense = [t.detach().contiguous().requires_grad_() for t in tt]  # the same values, contiguous: the same math
    same = F.scaled_dot_product_attention(*dense, is_causal=True)
    assert torch.equal(got.cpu(), same.cpu())
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-2, atol=1e-2)  # the card's matmul operands
    gout = torch.randn(want.shape)
    for out in (want, got, same):
        out.backward(gout.to(out.device))
    for c, t, d in zip(cpu, tt, dense):
        assert t.grad.stride() == t.stride()
        assert torch.equal(t.grad.cpu(), d.grad.cpu())
        # TT-NN's backward chain (ttnn matmuls on TF32 operands, the recomputed P rounded to bf16)
        torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=1e-2, atol=3e-2)


# --------------------------------------------------------------------------------------- the other fixes it found
def test_rms_norm_compiles_and_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.RMSNorm(32), nn.Linear(32, 8)).to(DEV)
    twin = nn.Sequential(nn.Linear(32, 32), nn.RMSNorm(32), nn.Linear(32, 8)).to(DEV)
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="ktt_tt_aot")
    for _ in range(3):
        x = torch.randn(4, 32).to(DEV)
        got, want = compiled(x), twin(x)
        assert torch.equal(got.cpu(), want.cpu())
        got.sum().backward()
        want.sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-6)


def test_batch_norm_in_evaluation_returns_the_running_statistics_and_trains_through_them():
    """Evaluation-mode batch norm saves (running_mean, 1 / sqrt(running_var + eps)), as CUDA and PyTorch's shape
    function do; its input gradient is the evaluation one (a frozen batch norm, fine-tuned through)."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    mean, var, w, b = torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)
    _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(
        *(t.to(DEV) for t in (x, w, b, mean, var)), False, 0.1, 1e-5
    )
    torch.testing.assert_close(save_mean.cpu(), mean)
    torch.testing.assert_close(save_invstd.cpu(), 1 / torch.sqrt(var + 1e-5), rtol=1e-5, atol=1e-6)
    bn = nn.BatchNorm2d(3).eval()
    bn.running_mean.copy_(mean)
    bn.running_var.copy_(var)
    for module in (bn, nn.Sequential(nn.Conv2d(3, 3, 1), bn).eval()):
        on_tt = copy.deepcopy(module).to(DEV)
        runs = [(module, x), (on_tt, x.to(DEV)), (torch.compile(on_tt, backend="ktt_tt_aot"), x.to(DEV))]
        grads = []
        for m, t in runs:
            t = t.clone().requires_grad_()
            out = m(t)
            out.square().sum().backward()
            torch.testing.assert_close(out.detach().cpu(), module(x).detach(), rtol=2e-3, atol=2e-3)
            grads.append(t.grad.cpu())
        for g in grads[1:]:
            torch.testing.assert_close(g, grads[0], rtol=1e-2, atol=1e-2)


def test_resize_to_the_same_size_keeps_strides_as_on_the_cpu():
    for device in ("cpu", DEV):
        x = torch.randn(3, 4, 5).to(device).permute(2, 0, 1)
        before = x.stride()
        x.resize_(5, 3, 4)
        assert x.stride() == before
        x.resize_as_(torch.empty(5, 3, 4))
        assert x.stride() == before


def test_sdpa_backward_returns_what_its_shape_function_says(fused_attention):
    """Every output of SDPA's backward, as its shape function has them: q, k, v gradients even where not asked for,
    and one like a mask that needs no gradient (HF's additive mask)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8).to(DEV) for _ in range(3))
    mask = torch.randn(1, 1, 4, 4).to(DEV)
    out, lse, *_ = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, mask)
    args = (torch.ones_like(out), q, k, v, mask, [True, False, True, False], out, lse, None, None, 4, 4, 0.0, False,
            None, None)  # fmt: skip
    real = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(*args)
    mode = mc.fake_mode()
    with mode:
        fargs = mc.to_fake(mode, args)
        fake = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(*fargs)
    assert not mc.compare_outputs("sdpa_backward", real, fake, args, fargs, "")


def test_in_place_ops_refuse_a_broadcast_shape_that_is_not_self_s():
    """An empty self that the other operand would broadcast to another shape: the CPU refuses, PyTorch's shape
    functions resize self; tt refuses as the CPU does (it was silently left as it was)."""
    for op in ("eq_", "fmod_", "pow_", "add_"):
        for device in ("cpu", DEV):
            with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
                getattr(torch.zeros(0, 1, 3, device=device), op)(torch.zeros(0, 10, 3, device=device))
