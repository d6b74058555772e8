"""LU-based linear algebra on tt (kohakutt/frontends/torch/aten/linalg_decomp.py) against the CPU in float64.

The references run on exactly the float32 values the card holds. The factorization and the substitutions are
element-wise fp32 operations (each exact, rounded once: u = 2^-24), so the classical bounds for Gaussian elimination
with partial pivoting apply. The backward error of the LU factors is within gamma_3n = 3 n u (times the growth
factor, at most 2 for the test matrices A = R / sqrt(n) + 3 I with R standard normal, which are diagonally dominant
enough that no element grows), and a solve of A x = b with those factors has a relative (infinity-norm) forward error
within ``cond_inf(A) * 6 n u / (1 - cond_inf(A) * 6 n u)``. The tests use ``TAU = 8 n cond_inf(A) u`` with
cond_inf(A) computed in float64 for each matrix, for:
- solve / inverse / lu_solve / solve_triangular: max |x - x_ref| <= TAU * max |x_ref| per right-hand side (each
  column of the inverse is a separate solve);
- the LU factors (same pivots as LAPACK when there are no near ties): max |LU - LU_ref| <= TAU * max |LU_ref| (first
  order perturbation of the factors by the backward error);
- det: relative error within n * TAU (|d det / det| = |tr(A^-1 dA)| <= n ||A^-1|| ||dA||); logabsdet: absolute error
  within n * TAU + n * 2^-21 * max |log |u_ii|| (the card's log is within 2 ulp of fp32, then n additions).
Gradients run PyTorch's backward formulas, whose products go through the card's matmul: float32 operands reach it as
TF32 (within TF32 = 3 * 2^-10 per product, tests/frontends/torch/test_linalg.py), and two chained products bound the
gradient of inv(A).sum() (= -A^-T 1 A^-T) elementwise by 3 * TF32 * (|A^-1|^T |G| |A^-1|^T).
Cholesky: SPD test matrices B B^T / n + I; the factor within 8 n kappa_2(A) u of LAPACK's (max-relative, as above)
and its backward error |L L^T - A| <= 2 gamma_(n+1) |L| |L^T| elementwise (Higham, Thm 10.3, a factor 2 to spare);
cholesky_solve / cholesky_inverse within TAU as the LU solves. QR of standard normal m x n matrices: Householder QR
is backward stable within c m n u (Higham, Thm 19.4), so Q and R (same signs as LAPACK's) within 8 m n kappa_2(A) u
of the CPU's, ||Q^T Q - I||_max <= 8 m n u and per column ||Q R - A|| <= 8 m n u ||a_j||. bfloat16: the float32
bound plus one rounding to bfloat16 (2^-8 of the largest element). Their gradients as solve's (8 TF32 units).
Singular matrices: info, LU and pivots as LAPACK's (exact zero pivots), non-finite solutions where the CPU has them,
and the checked forms raise PyTorch's own errors (torch.linalg.LinAlgError / RuntimeError) with the CPU's messages.
"""

from __future__ import annotations

import math

import pytest
import torch

import kohakutt  # noqa: F401  (registers the tt device)

DEV = torch.device("tt", 0)
U = 2.0**-24
TF32 = 3 * 2.0**-10


def well(*shape: int, seed: int = 0) -> torch.Tensor:
    """float32 matrices R / sqrt(n) + 3 I (condition numbers of a few units)."""
    n = shape[-1]
    r = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (r / math.sqrt(n) + 3 * torch.eye(n, dtype=torch.float64)).float()


def tau(a: torch.Tensor) -> torch.Tensor:
    """8 n cond_inf(A) u per matrix (shape (...,))."""
    a = a.double()
    n = a.shape[-1]
    return 8 * n * torch.linalg.cond(a, p=math.inf) * U


def close(actual: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    """max |actual - ref| <= bound * max |ref| over each matrix (``bound`` shaped as the batch)."""
    actual, ref = actual.cpu().double(), ref.double()
    assert actual.shape == ref.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(ref.shape)}"
    err = (actual - ref).abs().flatten(-2).amax(-1)
    scale = ref.abs().flatten(-2).amax(-1)
    limit = bound * scale
    assert bool((err <= limit).all()), f"{what}: error {err.max().item():.3g} > {limit.min().item():.3g}"


SHAPES = [(1, 1), (3, 3), (2, 8, 8), (33, 33)]


@pytest.mark.parametrize("shape", SHAPES)
def test_inv_solve_lu_det(shape: tuple[int, ...]) -> None:
    a = well(*shape, seed=len(shape) + shape[-1])
    b = torch.randn(*shape[:-1], 3, generator=torch.Generator().manual_seed(1))
    a64, b64, t = a.double(), b.double(), tau(a)
    at, bt = a.to(DEV), b.to(DEV)
    n = shape[-1]

    inv, info = torch.linalg.inv_ex(at)
    close(inv, torch.linalg.inv(a64), t, "inv")
    assert info.dtype == torch.int32 and bool((info.cpu() == 0).all())
    close(torch.inverse(at), torch.linalg.inv(a64), t, "torch.inverse")

    close(torch.linalg.solve(at, bt), torch.linalg.solve(a64, b64), t, "solve")
    close(torch.linalg.solve(at, bt.mT, left=False), torch.linalg.solve(a64, b64.mT, left=False), t, "solve right")
    vec = torch.linalg.solve(at, bt[..., 0])
    ref = torch.linalg.solve(a64, b64[..., 0])
    close(vec.unsqueeze(-1), ref.unsqueeze(-1), t, "solve vector rhs")

    lu, piv = torch.linalg.lu_factor(at)
    lu0, piv0 = torch.linalg.lu_factor(a64)
    assert torch.equal(piv.cpu(), piv0), "pivots differ from LAPACK's"
    close(lu, lu0, t, "lu_factor")
    for adjoint in (False, True):
        close(torch.linalg.lu_solve(lu, piv, bt, adjoint=adjoint),
              torch.linalg.lu_solve(lu0, piv0, b64, adjoint=adjoint), t, f"lu_solve adjoint={adjoint}")  # fmt: skip
    p, l_, u_ = torch.linalg.lu(at)
    p0, l0, u0 = torch.linalg.lu(a64)
    assert torch.equal(p.cpu().double(), p0)
    close(l_, l0, t, "lu L")
    close(u_, u0, t, "lu U")

    det = torch.linalg.det(at).cpu().double()
    det0 = torch.linalg.det(a64)
    assert bool(((det - det0).abs() <= n * t * det0.abs()).all()), f"det {det} vs {det0}"
    sign, logabs = torch.linalg.slogdet(at)
    sign0, logabs0 = torch.linalg.slogdet(a64)
    assert torch.equal(sign.cpu().double(), sign0)
    diag = lu0.diagonal(dim1=-2, dim2=-1).abs().log().abs().amax(-1)
    assert bool(((logabs.cpu().double() - logabs0).abs() <= n * t + n * 2.0**-21 * diag).all())
    assert torch.allclose(torch.logdet(at).cpu().double(), logabs0, rtol=0, atol=float((n * t + n * 2.0**-21 * diag)
                                                                                      .max()))  # fmt: skip


def test_triangular_and_rectangular() -> None:
    a = well(2, 8, 8, seed=5)
    b = torch.randn(2, 8, 4, generator=torch.Generator().manual_seed(2))
    t = tau(a)
    for upper in (True, False):
        m = a.triu() if upper else a.tril()
        for left, unit in ((True, False), (False, True)):
            rhs = b if left else b.mT
            got = torch.linalg.solve_triangular(m.to(DEV), rhs.to(DEV), upper=upper, left=left, unitriangular=unit)
            ref = torch.linalg.solve_triangular(m.double(), rhs.double(), upper=upper, left=left, unitriangular=unit)
            close(got if left else got.mT, ref if left else ref.mT, t, f"solve_triangular {upper=} {left=} {unit=}")
    for shape in ((5, 3), (3, 5)):
        r = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
        lu, piv, info = torch.linalg.lu_factor_ex(r.to(DEV))
        lu0, piv0, info0 = torch.linalg.lu_factor_ex(r.double())
        assert torch.equal(piv.cpu(), piv0) and torch.equal(info.cpu(), info0)
        # the rectangular factors are well within fp32 here: unit lower multipliers, three elimination steps
        close(lu, lu0, torch.tensor(16 * 5 * U), f"lu_factor {shape}")
        p, l_, u_ = torch.linalg.lu(r.to(DEV))
        assert torch.equal(p.cpu().double(), torch.linalg.lu(r.double())[0])
        close(p.cpu() @ l_.cpu() @ u_.cpu(), r, torch.tensor(16 * 5 * U), f"P L U = A {shape}")


def test_needs_pivoting() -> None:
    """Zeros on the diagonal: elimination without row exchanges would divide by zero."""
    a = torch.tensor([[0.0, 2.0, 1.0, 4.0], [3.0, 0.0, 1.0, 1.0], [1.0, 5.0, 0.0, 2.0], [2.0, 1.0, 6.0, 0.0]])
    t = tau(a)
    lu, piv = torch.linalg.lu_factor(a.to(DEV))
    lu0, piv0 = torch.linalg.lu_factor(a.double())
    assert torch.equal(piv.cpu(), piv0) and not torch.equal(piv0, torch.arange(1, 5, dtype=torch.int32))
    close(lu, lu0, t, "lu_factor with pivoting")
    close(torch.linalg.inv(a.to(DEV)), torch.linalg.inv(a.double()), t, "inv with pivoting")
    det0 = torch.linalg.det(a.double())
    assert abs(torch.linalg.det(a.to(DEV)).item() - det0.item()) <= 4 * t.item() * abs(det0.item())


def test_singular() -> None:
    s = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 1.0, 1.0]])
    lu, piv, info = torch.linalg.lu_factor_ex(s.to(DEV))
    lu0, piv0, info0 = torch.linalg.lu_factor_ex(s)
    assert torch.equal(piv.cpu(), piv0) and info.item() == info0.item() == 3
    assert torch.equal(lu.cpu(), lu0)  # every step is exact in binary here
    inv, info = torch.linalg.inv_ex(s.to(DEV))
    assert info.item() == 3 and not bool(inv.cpu().isfinite().any())
    x, info = torch.linalg.solve_ex(s.to(DEV), torch.ones(3, 1).to(DEV))
    assert info.item() == 3 and not bool(x.cpu().isfinite().all())
    assert torch.linalg.det(s.to(DEV)).item() == 0.0
    sign, logabs = torch.linalg.slogdet(s.to(DEV))
    assert sign.item() == 0.0 and logabs.item() == -math.inf
    _, z_info = torch.linalg.inv_ex(torch.zeros(2, 2).to(DEV))
    assert z_info.item() == torch.linalg.inv_ex(torch.zeros(2, 2))[1].item() == 1

    def message(fn, *args: torch.Tensor) -> tuple[type, str]:
        with pytest.raises((torch.linalg.LinAlgError, RuntimeError)) as e:
            fn(*args)
        return e.type, str(e.value)

    batch = torch.stack([torch.eye(3), s])
    cases = [(torch.linalg.inv, (s,)), (torch.linalg.inv, (batch,)), (torch.linalg.solve, (s, torch.ones(3))),
             (torch.linalg.lu_factor, (s,))]  # fmt: skip
    for fn, args in cases:
        assert message(fn, *[x.to(DEV) for x in args]) == message(fn, *args), fn.__name__


def test_empty_and_bfloat16() -> None:
    assert torch.linalg.inv(torch.zeros(0, 3, 3).to(DEV)).shape == (0, 3, 3)
    assert torch.equal(torch.linalg.det(torch.zeros(2, 0, 0).to(DEV)).cpu(), torch.ones(2))
    a = well(3, 3, seed=9).to(torch.bfloat16)
    lu, piv = torch.linalg.lu_factor(a.to(DEV))
    lu0, piv0 = torch.linalg.lu_factor(a.double())
    assert lu.dtype == torch.bfloat16 and torch.equal(piv.cpu(), piv0)
    # factored in float32 (TAU) then rounded once to bfloat16 (2^-8 of the largest element at most)
    close(lu, lu0, tau(a) + 2.0**-8, "bf16 lu_factor")
    with pytest.raises(RuntimeError, match="Low precision"):  # PyTorch refuses bf16 inverses on every device
        torch.linalg.inv(a.to(DEV))


def test_autograd() -> None:
    a = well(2, 8, 8, seed=11).double()
    b = torch.randn(2, 8, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)

    def grads(fn, *xs: torch.Tensor, dev: torch.device | str) -> list[torch.Tensor]:
        leaves = [x.float().to(dev).requires_grad_() if dev != "cpu" else x.clone().requires_grad_() for x in xs]
        fn(*leaves).sum().backward()
        return [x.grad.cpu().double() for x in leaves]

    (g,) = grads(torch.linalg.inv, a, dev=DEV)
    (g0,) = grads(torch.linalg.inv, a.float().double(), dev="cpu")
    ainv = torch.linalg.inv(a.float().double()).abs().mT
    bound = 3 * TF32 * (ainv @ torch.ones_like(ainv) @ ainv)
    assert bool(((g - g0).abs() <= bound).all()), f"inv grad error {(g - g0).abs().max().item():.3g}"
    # solve and det: their backward formulas solve with the returned LU / pivots (lu_solve on tt) then multiply on
    # the matrix engine: within a few TF32 units of the largest gradient element
    logabsdet = lambda x: torch.linalg.slogdet(x)[1]  # noqa: E731
    for fn, xs in ((torch.linalg.solve, (a, b)), (torch.linalg.det, (a,)), (logabsdet, (a,))):
        got = grads(fn, *xs, dev=DEV)
        ref = grads(fn, *[x.float().double() for x in xs], dev="cpu")
        for gg, rr in zip(got, ref):
            assert (gg - rr).abs().max() <= 8 * TF32 * rr.abs().max(), f"{fn}: {(gg - rr).abs().max().item():.3g}"


# ---------------------------------------------------------------------------------------------------- Cholesky, QR
def spd(*shape: int, seed: int = 0) -> torch.Tensor:
    """float32 symmetric positive-definite matrices B B^T / n + I (B standard normal)."""
    n = shape[-1]
    r = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (r @ r.mT / n + torch.eye(n, dtype=torch.float64)).float()


def kappa(a: torch.Tensor) -> torch.Tensor:
    """2-norm condition number per matrix, in float64."""
    return torch.linalg.cond(a.double())


@pytest.mark.parametrize("shape", SHAPES)
def test_cholesky(shape: tuple[int, ...]) -> None:
    a = spd(*shape, seed=shape[-1])
    a64, n = a.double(), shape[-1]
    t = 8 * n * kappa(a) * U
    for upper in (False, True):
        f, info = torch.linalg.cholesky_ex(a.to(DEV), upper=upper)
        assert info.dtype == torch.int32 and bool((info.cpu() == 0).all())
        f0 = torch.linalg.cholesky(a64, upper=upper)
        close(f, f0, t, f"cholesky {upper=}")
        lo = f.cpu().double().mT if upper else f.cpu().double()
        assert torch.equal(lo, lo.tril()), "factor not triangular"
        # backward error of the factor itself: |L L^T - A| <= gamma_(n+1) |L| |L^T| (with a factor 2 to spare)
        err = (lo @ lo.mT - a64).abs()
        assert bool((err <= 2 * (n + 1) * U * (lo.abs() @ lo.abs().mT)).all()), f"L L^T - A {err.max().item():.3g}"
    close(torch.linalg.cholesky(a.to(DEV)), torch.linalg.cholesky(a64), t, "linalg.cholesky")
    b = torch.randn(*shape[:-1], 3, generator=torch.Generator().manual_seed(7))
    lo0 = torch.linalg.cholesky(a)
    ts = tau(a)  # a solve with the (exact-input) factor: as for LU solves, 8 n cond_inf(A) u
    for upper in (False, True):
        fac = lo0.mT if upper else lo0
        got = torch.cholesky_solve(b.to(DEV), fac.to(DEV), upper=upper)
        close(got, torch.cholesky_solve(b.double(), fac.double(), upper=upper), ts, f"cholesky_solve {upper=}")
        got = torch.cholesky_inverse(fac.to(DEV), upper=upper)
        close(got, torch.cholesky_inverse(fac.double(), upper=upper), ts, f"cholesky_inverse {upper=}")


def test_cholesky_not_positive_definite() -> None:
    bad = torch.tensor([[4.0, 2.0, 1.0], [2.0, -3.0, 1.0], [1.0, 1.0, 5.0]])
    batch = torch.stack([spd(3, 3, seed=1), bad, -torch.eye(3)])
    for upper in (False, True):
        _, info = torch.linalg.cholesky_ex(batch.to(DEV), upper=upper)
        info0 = torch.linalg.cholesky_ex(batch, upper=upper)[1]
        assert torch.equal(info.cpu(), info0) and info0.tolist() == [0, 2, 1]
    lo, info = torch.linalg.cholesky_ex(bad.to(DEV))
    assert info.item() == 2 and bool(lo.cpu().isfinite().all())
    # only the triangle LAPACK reads counts: the other one may hold anything
    a = spd(4, 4, seed=2)
    junk = torch.randn(4, 4, generator=torch.Generator().manual_seed(5))
    for upper in (False, True):
        x = a.triu() + junk.tril(-1) if upper else a.tril() + junk.triu(1)
        f, info = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.int32, device=DEV)
        torch.linalg.cholesky_ex(x.to(DEV), upper=upper, out=(f, info))
        close(f, torch.linalg.cholesky(a.double(), upper=upper), 8 * 4 * kappa(a) * U, f"one triangle {upper=}")
        assert info.item() == 0
    assert lo.cpu()[0, 0].item() == 2.0 and lo.cpu()[1, 0].item() == 1.0  # the steps before the failure

    def message(fn, x: torch.Tensor, **kw: bool) -> tuple[type, str]:
        with pytest.raises((torch.linalg.LinAlgError, RuntimeError)) as e:
            fn(x, **kw)
        return e.type, str(e.value)

    ex = lambda x, **kw: torch.linalg.cholesky_ex(x, check_errors=True, **kw)  # noqa: E731
    for fn in (torch.linalg.cholesky, ex):
        for x in (bad, batch):
            for upper in (False, True):
                assert message(fn, x.to(DEV), upper=upper) == message(fn, x, upper=upper)
    with pytest.warns(UserWarning):  # torch.cholesky is deprecated
        assert message(torch.cholesky, bad.to(DEV)) == message(torch.cholesky, bad)


def qr_bound(a: torch.Tensor) -> torch.Tensor:
    """8 m n kappa_2(A) u per matrix: Householder QR is backward stable within c m n u (Higham, Thm 19.4), and Q, R
    move by kappa_2(A) times that."""
    m, n = a.shape[-2:]
    return 8 * m * n * kappa(a) * U


@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (7, 4), (4, 7), (2, 6, 3), (24, 24)])
def test_qr(shape: tuple[int, ...]) -> None:
    a = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    a64 = a.double()
    m, n = shape[-2:]
    t = qr_bound(a)
    eps = 8 * m * n * U
    for mode in ("reduced", "complete", "r"):
        q, r = torch.linalg.qr(a.to(DEV), mode=mode)
        q0, r0 = torch.linalg.qr(a64, mode=mode)
        assert q.shape == q0.shape and r.shape == r0.shape, mode
        close(r, r0, t, f"qr R {mode}")  # the same signs as LAPACK's on R's diagonal
        r64 = r.cpu().double()
        assert torch.equal(r64, r64.triu())
        if mode == "r":
            continue
        close(q, q0, t, f"qr Q {mode}")
        q64 = q.cpu().double()
        eye = torch.eye(q64.shape[-1], dtype=torch.float64)
        assert (q64.mT @ q64 - eye).abs().max() <= eps, f"Q^T Q - I {mode}"
        k = min(m, n)
        recon = q64[..., :, :k] @ r64[..., :k, :]
        col = a64.norm(dim=-2, keepdim=True)
        assert bool(((recon - a64).norm(dim=-2, keepdim=True) <= eps * col).all()), f"Q R - A {mode}"
    q, r = torch.empty(0, device=DEV), torch.empty(0, device=DEV)
    torch.linalg.qr(a.to(DEV), out=(q, r))
    close(r, torch.linalg.qr(a64)[1], t, "qr out=")


def test_qr_special() -> None:
    z = torch.linalg.qr(torch.zeros(3, 2).to(DEV), mode="complete")
    z0 = torch.linalg.qr(torch.zeros(3, 2), mode="complete")
    assert torch.equal(z[0].cpu().abs(), z0[0].abs()) and torch.equal(z[1].cpu(), z0[1])  # H = I: Q = I, R = 0
    q, r = torch.linalg.qr(torch.zeros(2, 0, 3).to(DEV))
    assert q.shape == (2, 0, 0) and r.shape == (2, 0, 3)
    q, r = torch.linalg.qr(torch.zeros(4, 0).to(DEV), mode="complete")
    assert torch.equal(q.cpu(), torch.eye(4)) and r.shape == (4, 0)
    with pytest.raises(RuntimeError, match="qr received unrecognized mode"):
        torch.linalg.qr(torch.ones(2, 2).to(DEV), mode="full")


def test_cholesky_qr_bfloat16_and_grad() -> None:
    a = spd(4, 4, seed=3).to(torch.bfloat16)  # PyTorch's CPU kernels refuse bfloat16: tt factors it in float32
    lo = torch.linalg.cholesky(a.to(DEV))
    assert lo.dtype == torch.bfloat16
    close(lo, torch.linalg.cholesky(a.double()), 8 * 4 * kappa(a) * U + 2.0**-8, "bf16 cholesky")
    q, r = torch.linalg.qr(a.to(DEV))
    q0, r0 = torch.linalg.qr(a.double())
    close(q, q0, qr_bound(a) + 2.0**-8, "bf16 qr Q")
    close(r, r0, qr_bound(a) + 2.0**-8, "bf16 qr R")
    # backward: PyTorch's formulas (triangular solves on tt, products on the matrix engine, TF32 operands)
    x = spd(2, 6, 6, seed=4).double()
    for fn in (torch.linalg.cholesky, lambda y: torch.linalg.qr(y)[1]):
        leaf = x.float().to(DEV).requires_grad_()
        fn(leaf).sum().backward()
        ref = x.float().double().requires_grad_()
        fn(ref).sum().backward()
        g, g0 = leaf.grad.cpu().double(), ref.grad
        assert (g - g0).abs().max() <= 8 * TF32 * g0.abs().max(), f"grad error {(g - g0).abs().max().item():.3g}"
