"""SVD and symmetric eigendecomposition on tt (kohakutt/frontends/torch/aten/linalg_spectral.py) against the CPU in
float64 on the same float32 values.

Singular vectors and eigenvectors are unique only up to sign (and rotation within repeated values), so what is
checked is what defines the decomposition: the values against the CPU's, the vectors' orthonormality and the
reconstruction. Jacobi methods stop when every pair is orthogonal (or every off-diagonal entry small) to
``4 sqrt(n) u`` relative (u = 2^-24) and each rotation is a few fp32 roundings, so with N = max(m, n):
- singular values / eigenvalues within ``16 N u ||A||_2`` of the float64 ones;
- ``|Q^T Q - I|`` within ``16 N u`` for every factor Q; ``|U S Vh - A|`` (``|V diag(w) V^T - A|``) within
  ``16 N u ||A||_2``.
Gradients run PyTorch's backward formulas, about four chained products on the card's matmul (TF32 operands: each
within TF32 = 3 * 2^-10 of its terms' magnitudes) with the inverse spectral gaps as factors; the test matrices have
well separated values (gaps >= a third of the values), so ``8 * TF32`` of the largest gradient entry bounds them.
"""

from __future__ import annotations

import pytest
import torch

import kohakutt  # noqa: F401  (registers the tt device)
from kohakutt.frontends.torch.aten import linalg_spectral

DEV = torch.device("tt", 0)
U32 = 2.0**-24
TF32 = 3 * 2.0**-10


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(seed))


def norm2(a: torch.Tensor) -> float:
    return max(1e-30, torch.linalg.matrix_norm(a.double(), 2).max().item()) if a.numel() else 1.0


def check_orthonormal(q: torch.Tensor, n: int, what: str) -> None:
    q = q.cpu().double()
    if q.shape[-1] == 0:
        return
    err = (q.mT @ q - torch.eye(q.shape[-1], dtype=torch.float64)).abs().max().item()
    assert err <= 16 * n * U32, f"{what}: |Q^T Q - I| = {err:.3g} > {16 * n * U32:.3g}"


def check_svd(a: torch.Tensor, full: bool) -> None:
    m, n = a.shape[-2:]
    big, scale = max(m, n, 1), norm2(a)
    u, s, vh = torch.linalg.svd(a.to(DEV), full_matrices=full)
    ru, rs, rvh = torch.linalg.svd(a.double(), full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (ru.shape, rs.shape, rvh.shape)
    assert u.dtype == s.dtype == vh.dtype == a.dtype
    u, s, vh = u.cpu().double(), s.cpu().double(), vh.cpu().double()
    assert (s - rs).abs().max().item() <= 16 * big * U32 * scale if s.numel() else True, "singular values"
    assert bool((s[..., :-1] >= s[..., 1:]).all()), "descending"
    check_orthonormal(u, big, "U")
    check_orthonormal(vh.mT, big, "V")
    k = s.shape[-1]
    rebuilt = (u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :]
    err = (rebuilt - a.double()).abs().max().item() if a.numel() else 0.0
    assert err <= 16 * big * U32 * scale, f"|U S Vh - A| = {err:.3g}"


SHAPES = [(4, 3), (3, 4), (5, 5), (2, 6, 4), (3, 2, 3), (1, 1), (7, 1), (1, 7), (16, 12)]


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_svd_random(shape, full):
    check_svd(randn(*shape, seed=sum(shape)), full)


def test_svd_rank_deficient_zero_and_repeated():
    """Zero singular values still get orthonormal vectors (U is completed by Householder QR), repeated ones too."""
    check_svd(randn(6, 2, seed=1) @ randn(2, 5, seed=2), True)
    check_svd(torch.zeros(4, 3), True)
    check_svd(torch.eye(4) * 3, False)
    check_svd(torch.diag(torch.tensor([1e-20, 1.0, 1e10, 0.0])), True)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0), (0, 2, 2), (2, 3, 0)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_empty_as_the_cpu(shape, full):
    got = torch.linalg.svd(torch.zeros(shape, device=DEV), full_matrices=full)
    ref = torch.linalg.svd(torch.zeros(shape), full_matrices=full)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and torch.equal(g.cpu(), r)


def test_svdvals_svd_and_bfloat16():
    a = randn(5, 3, seed=3)
    big, scale = 5, norm2(a)
    s = torch.linalg.svdvals(a.to(DEV)).cpu().double()
    assert (s - torch.linalg.svdvals(a.double())).abs().max().item() <= 16 * big * U32 * scale
    u, s2, v = torch.svd(a.to(DEV), some=True)  # the old API: V, not Vh
    rebuilt = (u.cpu().double() * s2.cpu().double()) @ v.cpu().double().mT
    assert (rebuilt - a.double()).abs().max().item() <= 16 * big * U32 * scale
    b = a.bfloat16()
    sb = torch.linalg.svdvals(b.to(DEV))
    assert sb.dtype == torch.bfloat16
    ref = torch.linalg.svdvals(b.double())
    assert (sb.cpu().double() - ref).abs().max().item() <= 2.0**-8 * ref.max().item() + 16 * big * U32 * scale


# ------------------------------------------------------------------------------------------------------------ eigh
def check_eigh(a: torch.Tensor, uplo: str = "L") -> None:
    n = a.shape[-1]
    sym = (a.tril() + a.tril(-1).mT) if uplo == "L" else (a.triu() + a.triu(1).mT)
    scale = norm2(sym)
    w, v = torch.linalg.eigh(a.to(DEV), UPLO=uplo)
    rw = torch.linalg.eigvalsh(sym.double())
    w, v = w.cpu().double(), v.cpu().double()
    assert (w - rw).abs().max().item() <= 16 * n * U32 * scale, "eigenvalues"
    assert bool((w[..., :-1] <= w[..., 1:]).all()), "ascending"
    check_orthonormal(v, n, "eigenvectors")
    err = ((v * w.unsqueeze(-2)) @ v.mT - sym.double()).abs().max().item()
    assert err <= 16 * n * U32 * scale, f"|V diag(w) V^T - A| = {err:.3g}"
    wv = torch.linalg.eigvalsh(a.to(DEV), UPLO=uplo).cpu().double()
    assert (wv - rw).abs().max().item() <= 16 * n * U32 * scale, "eigvalsh"


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("shape", [(3, 3), (4, 4), (5, 5), (2, 6, 6), (1, 1), (12, 12)])
def test_eigh_random(shape, uplo):
    """Only the UPLO triangle is read (the input is not symmetric), as on the CPU."""
    check_eigh(randn(*shape, seed=shape[-1]), uplo)


def test_eigh_special_matrices():
    check_eigh(torch.zeros(4, 4))
    check_eigh(torch.diag(torch.tensor([1.0, 1.0, 2.0, 0.0])))
    check_eigh(torch.diag(torch.tensor([-3.0, 0.0, 1e-30, 5.0])) + torch.ones(4, 4) * 1e-3)
    b = randn(6, 3, seed=4)
    check_eigh(b @ b.mT)  # rank 3: three zero eigenvalues
    w, v = torch.linalg.eigh(torch.zeros(0, 3, 3, device=DEV))
    assert w.shape == (0, 3) and v.shape == (0, 3, 3)


# -------------------------------------------------------------------------------------------------------- gradients
def spaced(m: int, n: int, seed: int) -> torch.Tensor:
    """Q1 diag(s) Q2^T with s evenly spaced in [2, 4]: well separated singular values."""
    g = _g(seed)
    k = min(m, n)
    q1, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return ((q1[:, :k] * torch.linspace(2, 4, k, dtype=torch.float64)) @ q2[:, :k].T).float()


@pytest.mark.parametrize("shape", [(5, 4), (4, 6), (5, 5)])
def test_gradients_through_pytorchs_formulas(shape):
    a = spaced(*shape, seed=sum(shape))

    def svd_loss(x):
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        w = torch.linspace(-1, 1, u.numel(), device=x.device).reshape(u.shape)
        return s.sum() + (u.abs() * w).sum() + ((u @ vh) ** 2).sum()

    def eigh_loss(x):
        w, v = torch.linalg.eigh(x @ x.mT)
        return (w * torch.arange(float(w.numel()), device=x.device)).sum() + (
            v.abs() * torch.linspace(-1, 1, v.numel(), device=x.device).reshape(v.shape)
        ).sum()

    for loss in (svd_loss, eigh_loss):
        xd, xt = a.double().requires_grad_(), a.to(DEV).requires_grad_()
        loss(xd).backward()
        loss(xt).backward()
        err = (xt.grad.cpu().double() - xd.grad).abs().max().item()
        assert err <= 8 * TF32 * xd.grad.abs().max().item(), f"{loss.__name__}: gradient error {err:.3g}"


def test_no_convergence_raises_linalg_error(monkeypatch):
    """A matrix not converged within MAX_SWEEPS raises torch.linalg.LinAlgError, as the CPU's LAPACK failure does,
    and the device stays usable."""
    monkeypatch.setattr(linalg_spectral, "MAX_SWEEPS", 0)
    with pytest.raises(torch.linalg.LinAlgError, match="failed to converge"):
        torch.linalg.svd(randn(3, 3).to(DEV))
    with pytest.raises(torch.linalg.LinAlgError, match="failed to converge"):
        torch.linalg.eigh(randn(3, 3).to(DEV))
    monkeypatch.undo()
    check_svd(randn(3, 3, seed=5), False)
