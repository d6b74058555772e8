"""Singular value and symmetric eigenvalue decompositions on ``tt``: Jacobi methods in the card's float32 arithmetic.

``_linalg_svd`` (``torch.linalg.svd``, ``svdvals``, ``torch.svd``, and what is built on them: ``pinv``, ``matrix_rank``,
the 2-norms) is one-sided Jacobi (Hestenes): the columns of X (A, or A^T when A is wide) are rotated in pairs until
every pair is orthogonal to working accuracy, |x_p . x_q| <= tol ||x_p|| ||x_q|| with tol = 4 sqrt(rows) u
(u = 2^-24, LAPACK sgesvj's criterion with a margin over the fp32 rounding of the inner products); then the singular
values are the column norms, V the accumulated rotations and U the orthonormal factor of the rotated columns (the
Householder QR of ``linalg_decomp``, which also completes U for ``full_matrices`` and for zero singular values).
``_linalg_eigh`` (``eigh``, ``eigvalsh``) is the classical two-sided Jacobi method on the triangle ``UPLO`` names:
each rotation zeroes a_pq, until every |a_pq| <= tol sqrt(|a_pp a_qq|) + u ||A||_F; the eigenvalues are the
diagonal, the eigenvectors the accumulated rotations.

Both run a parallel (round-robin) ordering: each sweep is n - 1 rounds of n / 2 disjoint pairs, all rotated at once
by element-wise tt ops, inner products as pairwise folds of exact fp32 additions (the card's ``sum`` and matmul would
round their operands to TF32), rotations from Rutishauser's formulas. After each sweep one flag is read from the card
(a synchronization): whether any pair was rotated. Both methods are backward stable at the level of their tolerance
(singular values and eigenvalues within a few n u ||A|| of the exact ones, the vectors orthonormal to a few n u;
one-sided Jacobi also gives small singular values to high relative accuracy); a matrix that has not converged after
``MAX_SWEEPS`` sweeps (never seen in practice: the convergence is quadratic) raises torch.linalg.LinAlgError as the CPU
does. Singular values come sorted descending, eigenvalues ascending; the sign of each singular vector pair and of
each eigenvector is the algorithm's own (as on the CPU, only the products are unique). Gradients are PyTorch's own
formulas (``svd_backward``, ``linalg_eig_backward``) over tt ops. bfloat16 inputs are decomposed in float32 and the
results rounded back. The cost is O(sweeps * n) rounds of O(batch * n * (m + n)) element-wise work: meant for the
small and medium matrices of model code.
"""

from __future__ import annotations

import math

import torch
from kohakutt.frontends.torch.aten.linalg_decomp import _fold, _form_q, householder_qr
from kohakutt.frontends.torch.aten.registry import Args, composite

_F32 = torch.float32
U32 = 2.0**-24
MAX_SWEEPS = 30
_IR = ("index_select", "mul", "add", "sub", "div", "sqrt", "abs", "gt", "where", "concat", "sort", "gather", "any")


def round_robin(n: int) -> list[list[int]]:
    """The orders of one sweep (n even): order r lists round r's pairs as (order[i], order[n/2 + i]), i < n/2; every
    pair of indices meets exactly once in the n - 1 rounds (the circle method, index 0 fixed)."""
    seats = list(range(n))
    rounds = []
    for _ in range(n - 1):
        h = n // 2
        rounds.append(seats[:h] + seats[n - 1 : h - 1 : -1])
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return rounds


def _rotation(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(c, s) of the Jacobi rotation that zeroes z in the symmetric 2 x 2 [[x, z], [z, y]] (Rutishauser: zeta =
    (y - x) / 2z, t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)), c = 1 / sqrt(1 + t^2), s = c t); the identity where
    ``live`` is false. Returns (c, s, t)."""
    zz = torch.where(live, z, 1.0)
    zeta = (y - x) / (2 * zz)
    a = zeta.abs()
    sign = torch.where(zeta >= 0, 1.0, -1.0)
    big = a > 2.0**60  # zeta^2 would overflow: t = 1 / 2 zeta to fp32 accuracy
    t = torch.where(big, 0.5 / torch.where(big, zeta, 1.0), sign / (a + (1 + torch.where(big, 0.0, zeta) ** 2).sqrt()))
    t = torch.where(live, t, 0.0)
    c = 1 / (1 + t * t).sqrt()
    return c, c * t, t


def _quiet(flags: list[torch.Tensor]) -> bool:
    """Whether no pair rotated in a sweep: one read from the card."""
    return not bool(torch.stack(flags).any().item())


def _no_convergence(what: str) -> torch.linalg.LinAlgError:
    return torch.linalg.LinAlgError(
        f"{what}: The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
        f"repeated singular values (Jacobi on tt: no convergence in {MAX_SWEEPS} sweeps)."
    )


# ------------------------------------------------------------------------------------------------------------- SVD
def one_sided_jacobi(x: torch.Tensor, vectors: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x (b, r, c) float32, r >= c: (W^T (b, c, r), V^T (b, c, c) or None) with W = x V, V orthogonal, W's columns
    orthogonal to working accuracy. Rows of the returned transposes are the rotated columns."""
    b, r, c = x.shape
    n = c + c % 2  # an odd count gets a zero column, which never rotates
    rows = torch.cat([x.mT, x.new_zeros(b, n - c, r)], 1) if n != c else x.mT
    if vectors:  # W and V rotate together: one tensor (b, n, r + n)
        eye = torch.eye(n, dtype=_F32, device=x.device).expand(b, n, n)
        rows = torch.cat([rows, eye], -1)
    tol = 4 * math.sqrt(r) * U32
    order = list(range(n))  # column j of the matrix is row order[j] of `rows`
    h = n // 2
    for _ in range(MAX_SWEEPS):
        flags = []
        for pairing in round_robin(n):
            at = {j: i for i, j in enumerate(order)}
            pick = [at[j] for j in pairing]  # positions of this round's columns in `rows`
            rows = rows.index_select(1, torch.tensor(pick, device=x.device))
            order = list(pairing)
            p, q = rows[:, :h], rows[:, h:]
            wp, wq = p[..., :r], q[..., :r]
            sums = _fold(torch.stack([wp * wp, wq * wq, wp * wq]), "add", 0.0)  # (3, b, h): alpha, beta, gamma
            alpha, beta, gamma = sums[0], sums[1], sums[2]
            live = gamma.abs() > tol * (alpha * beta).sqrt()
            flags.append(live.any())
            cs, sn, _ = _rotation(alpha, beta, gamma, live)
            cs, sn = cs.unsqueeze(-1), sn.unsqueeze(-1)
            rows = torch.cat([cs * p - sn * q, sn * p + cs * q], 1)
        if _quiet(flags):
            break
    else:
        raise _no_convergence("linalg.svd")
    back = torch.tensor([order.index(j) for j in range(c)], device=x.device)
    rows = rows.index_select(1, back)
    return rows[..., :r], (rows[..., r : r + c] if vectors else None)


def svd(a: torch.Tensor, full: bool, uv: bool) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """a (b, m, n) float32, m, n > 0: (U, S descending, Vh) as torch.linalg.svd, U / Vh None unless ``uv``."""
    b, m, n = a.shape
    wide = m < n
    x = a.mT if wide else a
    r, c = x.shape[-2:]
    wt, vt = one_sided_jacobi(x, uv)
    sigma = _fold(wt * wt, "add", 0.0).sqrt()  # (b, c)
    sigma, rank = sigma.sort(dim=-1, descending=True, stable=True)
    if not uv:
        return None, sigma, None
    wt = wt.gather(1, rank.unsqueeze(-1).expand(b, c, r))
    vt = vt.gather(1, rank.unsqueeze(-1).expand(b, c, c))
    qr, vs, taus = householder_qr(wt.mT.contiguous())  # W = Q R, R diagonal up to the tolerance: U = Q sign(R)
    ux = _form_q(vs, taus, r, r if full else c, b, a.device)
    sign = torch.where(qr.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0)  # (b, c)
    ux = torch.cat([ux[..., :c] * sign.unsqueeze(-2), ux[..., c:]], -1)
    if wide:  # A = X^T = V S U^T
        return vt.mT, sigma, ux.mT
    return ux, sigma, vt


@composite("_linalg_svd", "_linalg_svd.U", ir_ops=_IR)
def _linalg_svd(a: Args, outs: list[torch.Tensor]) -> None:
    A, full, uv = a.A, bool(a.full_matrices), bool(a.compute_uv)
    U, S, Vh = outs
    m, n = A.shape[-2:]
    if S.numel() == 0:  # an empty batch or matrix: identities where full matrices are asked for
        if uv and U.numel():
            U.copy_(torch.eye(m, U.shape[-1], dtype=U.dtype, device=U.device).expand(U.shape))
        if uv and Vh.numel():
            Vh.copy_(torch.eye(Vh.shape[-2], n, dtype=Vh.dtype, device=Vh.device).expand(Vh.shape))
        return
    u, s, vh = svd(A.to(_F32).reshape(-1, m, n), full, uv)
    S.copy_(s.reshape(S.shape))
    if uv:
        U.copy_(u.reshape(U.shape))
        Vh.copy_(vh.reshape(Vh.shape))


# ------------------------------------------------------------------------------------------------------------ eigh
def cyclic_jacobi(a: torch.Tensor, vectors: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """a (b, n, n) symmetric float32: (eigenvalues (b, n) unsorted, eigenvectors (b, n, n) as columns or None)."""
    b, n0, _ = a.shape
    n = n0 + n0 % 2  # an odd order gets a decoupled zero row and column
    if n != n0:
        a = torch.nn.functional.pad(a, (0, 1, 0, 1))
    v = torch.eye(n, dtype=_F32, device=a.device).expand(b, n, n) if vectors else None
    tol = 4 * math.sqrt(n) * U32
    floor = U32 * _fold((a * a).reshape(b, -1), "add", 0.0).sqrt()  # u ||A||_F: the rounding noise level
    h = n // 2
    order = list(range(n))
    first = torch.arange(h, device=a.device)
    block = (torch.arange(n, device=a.device).unsqueeze(-1) == torch.arange(n, device=a.device) + h) | (
        torch.arange(n, device=a.device).unsqueeze(-1) + h == torch.arange(n, device=a.device)
    )  # the (i, h + i) and (h + i, i) entries: each pair's off-diagonal element
    for _ in range(MAX_SWEEPS):
        flags = []
        for pairing in round_robin(n):
            at = {j: i for i, j in enumerate(order)}
            pick = torch.tensor([at[j] for j in pairing], device=a.device)
            a = a.index_select(1, pick).index_select(2, pick)
            if v is not None:
                v = v.index_select(2, pick)
            order = list(pairing)
            d = a.diagonal(dim1=-2, dim2=-1)
            app, aqq = d[:, :h], d[:, h:]
            apq = a[:, first, first + h]
            live = apq.abs() > tol * (app * aqq).abs().sqrt() + floor.unsqueeze(-1)
            flags.append(live.any())
            c, s, _ = _rotation(app, aqq, apq, live)
            cc, ss = c.unsqueeze(-2), s.unsqueeze(-2)  # column rotation: A J
            p, q = a[..., :h], a[..., h:]
            a = torch.cat([cc * p - ss * q, ss * p + cc * q], -1)
            cr, sr = c.unsqueeze(-1), s.unsqueeze(-1)  # row rotation: J^T (A J)
            p, q = a[:, :h], a[:, h:]
            a = torch.cat([cr * p - sr * q, sr * p + cr * q], 1)
            live2 = torch.cat([live, live], -1)
            a = torch.where(block & live2.unsqueeze(-1), 0.0, a)  # the rotated pairs' a_pq is zero by construction
            if v is not None:
                p, q = v[..., :h], v[..., h:]
                v = torch.cat([cc * p - ss * q, ss * p + cc * q], -1)
        if _quiet(flags):
            break
    else:
        raise _no_convergence("linalg.eigh")
    back = torch.tensor([order.index(j) for j in range(n0)], device=a.device)
    w = a.diagonal(dim1=-2, dim2=-1).index_select(1, back)
    if v is not None:
        v = v.index_select(2, back)[:, :n0]
    return w, v


@composite("_linalg_eigh", "_linalg_eigh.eigenvalues", ir_ops=(*_IR, "tril", "triu"))
def _linalg_eigh(a: Args, outs: list[torch.Tensor]) -> None:
    A, vectors = a.A, bool(a.compute_v)
    w_out, v_out = outs
    n = A.shape[-1]
    if w_out.numel() == 0:
        return
    x = A.to(_F32).reshape(-1, n, n)
    tri = x.tril() if a.UPLO.upper() == "L" else x.triu()
    sym = tri + (tri.tril(-1) if a.UPLO.upper() == "L" else tri.triu(1)).mT
    w, v = cyclic_jacobi(sym, vectors)
    w, rank = w.sort(dim=-1, stable=True)
    w_out.copy_(w.reshape(w_out.shape))
    if vectors:
        v = v.gather(2, rank.unsqueeze(-2).expand(v.shape))
        v_out.copy_(v.reshape(v_out.shape))
