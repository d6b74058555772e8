"""Linear-algebra decompositions on ``tt``: LU factorization with partial pivoting and what is built on it (solve,
inverse, determinant, log-determinant, triangular solves), Cholesky (factor, solve, inverse) and Householder QR.

Every kernel is a composition of other tt ops run on the card: a Python loop over the static matrix size ``n``, each
step an argmax of ``|column|`` for the pivot, row swaps by ``gather`` with device index tensors, and the elimination as
an outer product by broadcasting (element-wise fp32 on the card is exact IEEE arithmetic, where the matrix engine
would round its operands to TF32). Nothing is read back to the host, so the calls return at once; the checked forms
(``torch.linalg.inv``, ``solve``, ``lu_factor``) are PyTorch's compositions, whose ``_linalg_check_errors`` reads
``info`` once at the end to raise PyTorch's own error.

Results follow LAPACK's conventions as PyTorch's CPU kernels do: ``pivots`` are 1-based int32 row swaps, ``info`` is
the 1-based index of the first exactly-zero pivot (0 when there is none), a zero pivot is not divided by during the
factorization (its column below is zero too), and solves with a singular factor give the infinities / NaNs of the
division by zero. ``_linalg_det`` / ``_linalg_slogdet`` factor ``A^T`` for contiguous ``A`` and ``_linalg_solve_ex``
factors ``A``, as the CPU does, so the ``LU`` / ``pivots`` they return feed PyTorch's backward formulas unchanged.
bfloat16 matrices are factored in float32 and the results rounded back. The cost is O(n) steps of O(batch * n * n)
element-wise work: meant for the small / medium matrices of model code, not large dense solves.

Cholesky (``linalg_cholesky_ex``, ``cholesky``) is right-looking on the lower triangle (``upper`` factors the upper
one as the lower triangle of ``A^T``, as potrf 'U' reads it): exact fp32 steps and a square root, so the computed
factor satisfies L L^T = A + dA with |dA| <= gamma_(n+1) |L| |L^T| (Higham, Thm 10.3; gamma_k = k u / (1 - k u),
u = 2^-24), and ``info`` is the order of the first leading minor whose pivot is not > 0, as LAPACK reports it.
``cholesky_solve`` / ``cholesky_inverse`` are two substitutions with the factor. QR (``linalg_qr``) is Householder's
with LAPACK geqrf's reflectors (R's diagonal is -sign(alpha) times the column norm, H = I for a zero column below
the diagonal) and Q accumulated backwards as orgqr does, so Q and R match the CPU's up to rounding; the norms and
inner products are pairwise folds of exact fp32 additions (the card's ``sum`` / matmul would round their operands to
TF32), giving Householder QR's backward error: A + dA = Q R with ||da_j|| <= c m n u ||a_j|| per column and
||Q^T Q - I|| <= c m n u (Higham, Thm 19.4). The column norms are not rescaled: entries beyond ~1e19 overflow.
PyTorch's CPU kernels refuse bfloat16 for these; ``tt`` factors bfloat16 in float32 and rounds the results back.
"""

from __future__ import annotations

import torch
from kohakutt.frontends.torch.aten.registry import Args, composite

aten = torch.ops.aten
_F32 = torch.float32
_STEP_OPS = ("abs", "argmax", "where", "gather", "div", "mul", "sub", "eq", "gt", "lt", "amin")


def _batched(x: torch.Tensor) -> torch.Tensor:
    """``x`` (..., m, n) as a (batch, m, n) float32 tensor on the same device."""
    return x.to(_F32).reshape(-1, *x.shape[-2:])


def _swap_index(rows: torch.Tensor, k: int, p: torch.Tensor) -> torch.Tensor:
    """(batch, m) row order exchanging row ``k`` with row ``p`` (batch,) int64, every other row in place."""
    pk = p.unsqueeze(-1)
    return torch.where(rows == k, pk, torch.where(rows == pk, k, rows))


def lu_factor(a: torch.Tensor, pivot: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LU factorization of ``a`` (batch, m, n) float32 on the device, LAPACK getrf's way (right-looking, partial
    pivoting on the largest ``|value|``, first one on ties): (LU (batch, m, n), pivots (batch, min(m, n)) 1-based
    int64, info (batch,) int64 = first zero pivot, 1-based, or 0)."""
    b, m, n = a.shape
    dev = a.device
    rows = torch.arange(m, device=dev)
    cols = torch.arange(n, device=dev)
    lu = a.clone()
    piv = []
    for k in range(min(m, n)):
        if pivot and k < m - 1:
            p = lu[:, k:, k].abs().argmax(-1) + k
            idx = _swap_index(rows, k, p)
            lu = lu.gather(1, idx.unsqueeze(-1).expand(b, m, n))
            piv.append(p)
        else:
            piv.append(torch.full((b,), k, dtype=torch.int64, device=dev))
        if k == m - 1:
            break
        head = lu[:, k, k]
        # LAPACK does not divide by a zero pivot: its column below is all zeros then and stays so
        mult = lu[:, :, k] / torch.where(head == 0, 1.0, head).unsqueeze(-1)
        below = (rows > k).unsqueeze(-1)
        update = lu - mult.unsqueeze(-1) * lu[:, k, :].unsqueeze(-2)
        # the masks select whole results (never 0 * x, which is NaN for an infinite x)
        lu = torch.where(below & (cols > k), update, torch.where(below & (cols == k), mult.unsqueeze(-1), lu))
    pivots = torch.stack(piv, -1) + 1 if piv else torch.zeros((b, 0), dtype=torch.int64, device=dev)
    return lu, pivots, _first_zero(lu.diagonal(dim1=-2, dim2=-1))


def _first_zero(d: torch.Tensor) -> torch.Tensor:
    """(batch,) int64: the 1-based position of the first exact zero along the last dim of ``d``, or 0."""
    k = d.shape[-1]
    if k == 0:
        return torch.zeros(d.shape[:-1], dtype=torch.int64, device=d.device)
    pos = torch.arange(1, k + 1, device=d.device)
    first = torch.where(d == 0, pos, k + 1).amin(-1)
    return torch.where(first > k, 0, first)


def _row_order(pivots: torch.Tensor, m: int, reverse: bool = False) -> torch.Tensor:
    """(batch, m) int64: the row order the swaps ``pivots`` (batch, k) 1-based make, applied first to last
    (``P``: (P B)[i] = B[order[i]]) or last to first (``P^T``)."""
    b, k = pivots.shape
    order = torch.arange(m, device=pivots.device).expand(b, m)
    rows = torch.arange(m, device=pivots.device)
    p0 = pivots.to(torch.int64) - 1
    for j in reversed(range(k)) if reverse else range(k):
        order = order.gather(1, _swap_index(rows, j, p0[:, j]))
    return order


def _triangular(t: torch.Tensor, y: torch.Tensor, lower: bool, unit: bool, trans: bool) -> torch.Tensor:
    """Solve T X = Y for (batch, n, n) ``t`` read as its lower or upper triangle (of ``t^T`` when ``trans``), unit
    diagonal when ``unit``; ``y`` (batch, n, r). Column-oriented substitution by broadcasting: exact fp32 steps."""
    n = t.shape[-1]
    rows = torch.arange(n, device=t.device).unsqueeze(-1)  # (n, 1)
    diag = t.diagonal(dim1=-2, dim2=-1)
    for j in range(n) if lower else reversed(range(n)):
        yj = y[:, j, :]
        if not unit:
            yj = yj / diag[:, j].unsqueeze(-1)
            y = torch.where(rows == j, yj.unsqueeze(-2), y)
        if (lower and j == n - 1) or (not lower and j == 0):
            continue
        col = t[:, j, :] if trans else t[:, :, j]  # column j of T
        y = torch.where(rows > j if lower else rows < j, y - col.unsqueeze(-1) * yj.unsqueeze(-2), y)
    return y


def lu_solve(lu: torch.Tensor, pivots: torch.Tensor, rhs: torch.Tensor, adjoint: bool = False) -> torch.Tensor:
    """Solve A X = B (A^T X = B when ``adjoint``) from A's factorization ``lu`` (batch, n, n) and ``pivots``
    (batch, n): ``rhs`` (batch, n, r) float32; all on the device."""
    n = lu.shape[-1]
    r = rhs.shape[-1]
    b = lu.shape[0]
    if not adjoint:  # L U X = P B
        y = rhs.gather(1, _row_order(pivots, n).unsqueeze(-1).expand(b, n, r))
        y = _triangular(lu, y, lower=True, unit=True, trans=False)
        return _triangular(lu, y, lower=False, unit=False, trans=False)
    # U^T L^T (P X) = B
    y = _triangular(lu, rhs, lower=True, unit=False, trans=True)
    y = _triangular(lu, y, lower=False, unit=True, trans=True)
    return y.gather(1, _row_order(pivots, n, reverse=True).unsqueeze(-1).expand(b, n, r))


def _broadcast_solve(
    lu: torch.Tensor, pivots: torch.Tensor, rhs: torch.Tensor, left: bool, adjoint: bool
) -> torch.Tensor:
    """:func:`lu_solve` for PyTorch's shapes: ``lu`` (..., n, n), ``rhs`` (..., n, r) (left) or (..., r, n) (right),
    batch dims broadcast; the result is float32 with the broadcast shape."""
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _broadcast_solve(lu, pivots, rhs.mT, True, not adjoint).mT
    n = lu.shape[-1]
    batch = torch.broadcast_shapes(lu.shape[:-2], rhs.shape[:-2])
    r = rhs.shape[-1]
    if n == 0 or r == 0 or 0 in batch:
        return torch.zeros((*batch, n, r), dtype=_F32, device=rhs.device)
    f = _batched(lu.expand(*batch, n, n))
    p = pivots.expand(*batch, n).reshape(-1, n)
    x = lu_solve(f, p, _batched(rhs.expand(*batch, n, r)), adjoint)
    return x.reshape(*batch, n, r)


def _factor(x: torch.Tensor, pivot: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`lu_factor` of ``x`` (..., m, n) any float dtype: LU float32 (..., m, n), pivots int64 (..., k),
    info int64 (...)."""
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    if x.numel() == 0:
        k = min(m, n)
        return (torch.zeros(x.shape, dtype=_F32, device=x.device),
                torch.arange(1, k + 1, device=x.device).expand(*batch, k),
                torch.zeros(batch, dtype=torch.int64, device=x.device))  # fmt: skip
    lu, piv, info = lu_factor(_batched(x), pivot)
    return lu.reshape(x.shape), piv.reshape(*batch, -1), info.reshape(batch)


# ---------------------------------------------------------------------------------------------------- kernels
@composite("linalg_lu_factor_ex", "linalg_lu_factor_ex.out", ir_ops=_STEP_OPS)
def _lu_factor_ex(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.lu_factor_ex (``pivot=False`` too, as on CUDA: no row exchanges)."""
    lu, piv, info = _factor(a.A, bool(a.pivot))
    outs[0].copy_(lu)
    outs[1].copy_(piv)
    outs[2].copy_(info)
    if a.check_errors:
        aten._linalg_check_errors(outs[2], "torch.linalg.lu_factor_ex", is_matrix=a.A.dim() == 2)


def _permutation(piv: torch.Tensor, m: int) -> torch.Tensor:
    """The (..., m, m) float32 permutation matrix P with A = P L U for the 1-based row swaps ``piv`` (..., k)."""
    batch, k = piv.shape[:-1], piv.shape[-1]
    if piv.numel() == 0:
        return torch.eye(m, dtype=_F32, device=piv.device).expand(*batch, m, m).clone()
    order = _row_order(piv.reshape(-1, k), m).reshape(*batch, m)
    rows = torch.arange(m, device=piv.device).unsqueeze(-1)
    return (rows == order.unsqueeze(-2)).to(_F32)  # P[r, c] = 1 where r = order[c]


def _unpack(lu: torch.Tensor, outs: list[torch.Tensor]) -> None:
    """L (unit lower, (..., m, k)) and U (upper, (..., k, n)) of a packed ``lu`` into outs[1], outs[2]."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    eye = torch.eye(m, k, dtype=_F32, device=lu.device)
    outs[1].copy_(lu[..., :, :k].tril(-1) + eye)
    outs[2].copy_(lu[..., :k, :].triu())


@composite("linalg_lu", "linalg_lu.out", ir_ops=(*_STEP_OPS, "tril", "triu"))
def _linalg_lu(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.lu: A = P L U with P a permutation matrix, L unit lower (m, k), U upper (k, n)."""
    lu, piv, _ = _factor(a.A, bool(a.pivot))
    _unpack(lu, outs)
    if a.pivot:
        outs[0].copy_(_permutation(piv, a.A.shape[-2]))


@composite("lu_unpack", "lu_unpack.out", ir_ops=("gather", "eq", "tril", "triu"))
def _lu_unpack(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.lu_unpack of ``linalg.lu_factor``'s results (what its backward and ``linalg.lu_solve``'s use)."""
    lu, piv = a.LU_data, a.LU_pivots
    if a.unpack_data and outs[1].numel() + outs[2].numel():
        _unpack(lu, outs)
    if a.unpack_pivots and outs[0].numel():
        outs[0].copy_(_permutation(piv, lu.shape[-2]))


@composite("linalg_lu_solve", "linalg_lu_solve.out", ir_ops=("gather", "div", "mul", "sub", "where"))
def _linalg_lu_solve(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.lu_solve from ``linalg.lu_factor``'s ``LU`` and ``pivots`` (left / right, ``adjoint``)."""
    outs[0].copy_(_broadcast_solve(a.LU, a.pivots, a.B, bool(a.left), bool(a.adjoint)))


@composite("linalg_solve_triangular", "linalg_solve_triangular.out", ir_ops=("div", "mul", "sub", "where"))
def _solve_triangular(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.solve_triangular: substitution on the card (left / right, upper / lower, unit diagonal)."""
    t, rhs, upper = a.self, a.B, bool(a.upper)
    if not a.left:  # X T = B  <=>  T^T X^T = B^T
        t, rhs, upper = t.mT, rhs.mT, not upper
    n, r = t.shape[-1], rhs.shape[-1]
    batch = torch.broadcast_shapes(t.shape[:-2], rhs.shape[:-2])
    if n == 0 or r == 0 or 0 in batch:
        return
    x = _triangular(_batched(t.expand(*batch, n, n)), _batched(rhs.expand(*batch, n, r)), lower=not upper,
                    unit=bool(a.unitriangular), trans=False).reshape(*batch, n, r)  # fmt: skip
    outs[0].copy_(x if a.left else x.mT)


@composite("_linalg_solve_ex", "_linalg_solve_ex.result", ir_ops=_STEP_OPS)
def _solve_ex(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.solve(_ex): A's LU factorization, then substitution; vector right-hand sides as PyTorch's."""
    A, B, left = a.A, a.B, bool(a.left)
    lu, piv, info = _factor(A)
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    rhs = (B.unsqueeze(-1) if left else B.unsqueeze(-2)) if vector else B
    x = _broadcast_solve(lu, piv, rhs, left, False)
    outs[0].copy_(x.squeeze(-1 if left else -2) if vector else x)
    outs[1].copy_(lu)
    outs[2].copy_(piv)
    outs[3].copy_(info)
    if a.check_errors:
        aten._linalg_check_errors(outs[3], "torch.linalg.solve_ex", is_matrix=A.dim() == 2)


@composite("linalg_inv_ex", "linalg_inv_ex.inverse", ir_ops=_STEP_OPS)
def _inv_ex(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.inv(_ex) / torch.inverse: solve A X = I (the CPU's method), ``info`` from the factorization."""
    A = a.A
    lu, piv, info = _factor(A)
    n = A.shape[-1]
    eye = torch.eye(n, dtype=_F32, device=A.device).expand(A.shape)
    outs[0].copy_(_broadcast_solve(lu, piv, eye, True, False))
    outs[1].copy_(info)
    if a.check_errors:
        aten._linalg_check_errors(outs[1], "linalg.inv_ex", is_matrix=A.dim() == 2)


def _det_factor(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(LU, pivots, diagonal of U, (..., n) -1 where a pivot exchanged rows else 1) of A^T for contiguous A
    (det A^T = det A: the CPU's choice, which its backward formula expects), else of A."""
    lu, piv, _ = _factor(A.mT if A.is_contiguous() else A)
    n = A.shape[-1]
    swaps = torch.where(piv != torch.arange(1, n + 1, device=A.device), -1.0, 1.0)
    return lu, piv, lu.diagonal(dim1=-2, dim2=-1), swaps


def _fold(x: torch.Tensor, op: str, empty: float) -> torch.Tensor:
    """``x`` combined along its last dim by element-wise ``op`` ("mul" / "add") in a pairwise tree: exact fp32 steps
    (the card's reductions would round their operands on the matrix engine)."""
    if x.shape[-1] == 0:
        return torch.full(x.shape[:-1], empty, dtype=x.dtype, device=x.device)
    f = torch.mul if op == "mul" else torch.add
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        y = f(x[..., :h], x[..., h : 2 * h])
        x = torch.cat([y, x[..., 2 * h :]], -1) if x.shape[-1] % 2 else y
    return x[..., 0]


@composite("_linalg_det", "_linalg_det.result", ir_ops=(*_STEP_OPS, "concat"))
def _det(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.det / torch.det: the product of U's diagonal, negated for each row exchange."""
    lu, piv, diag, swaps = _det_factor(a.A)
    outs[0].copy_(_fold(diag * swaps, "mul", 1.0))
    outs[1].copy_(lu)
    outs[2].copy_(piv)


@composite("_linalg_slogdet", "_linalg_slogdet.sign", ir_ops=(*_STEP_OPS, "sign", "log", "add", "concat"))
def _slogdet(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.slogdet / torch.logdet: sign and sum of log |U's diagonal| (0 and -inf when singular)."""
    lu, piv, diag, swaps = _det_factor(a.A)
    outs[0].copy_(_fold(diag.sign() * swaps, "mul", 1.0))
    outs[1].copy_(_fold(diag.abs().log(), "add", 0.0))
    outs[2].copy_(lu)
    outs[3].copy_(piv)


# ---------------------------------------------------------------------------------------------------- Cholesky
def cholesky_factor(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cholesky factorization A = L L^T of ``a`` (batch, n, n) float32 on the device, reading its lower triangle
    only (LAPACK potrf 'L'): right-looking, one column per step by exact fp32 element-wise operations and a square
    root. Returns (L (batch, n, n) lower, info (batch,) int64 = order of the first leading minor that is not
    positive-definite, or 0). A matrix whose step ``k`` fails keeps the partly updated values from column ``k`` on
    (finite; the factor is meaningful only where ``info == 0``, as PyTorch documents)."""
    b, n, _ = a.shape
    dev = a.device
    rows = torch.arange(n, device=dev)
    below_col = rows.unsqueeze(-1)  # (n, 1) row index
    w = a.clone()
    good = torch.ones((b,), dtype=torch.bool, device=dev)
    heads = []
    for k in range(n):
        d = w[:, k, k]
        heads.append(d)
        good = good & (d > 0)  # NaN is not positive either
        lkk = torch.where(good, d, 1.0).sqrt()
        col = torch.where(rows > k, w[:, :, k] / lkk.unsqueeze(-1), torch.where(rows == k, lkk.unsqueeze(-1), 0.0))
        new = torch.where(rows == k, col.unsqueeze(-1), w)  # column k of L written (the mask broadcasts over columns)
        if k < n - 1:
            trail = (below_col > k) & (rows > k)
            new = torch.where(trail, w - col.unsqueeze(-1) * col.unsqueeze(-2), new)
        w = torch.where(good.view(b, 1, 1), new, w)
    return w.tril(), _first_failure(torch.stack(heads, -1))


def _first_failure(d: torch.Tensor) -> torch.Tensor:
    """(batch,) int64: the 1-based position of the first element of ``d`` (batch, n) that is not > 0, or 0."""
    n = d.shape[-1]
    pos = torch.arange(1, n + 1, device=d.device)
    first = torch.where(d > 0, n + 1, pos).amin(-1)
    return torch.where(first > n, 0, first)


def _cholesky(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, or U = L^T when ``upper`` (..., n, n) float32, info int64 (...)) of ``A`` (..., n, n) any float dtype:
    ``upper`` factors the upper triangle (LAPACK potrf 'U') as the lower one of ``A^T``."""
    batch = A.shape[:-2]
    if A.numel() == 0:
        return torch.zeros(A.shape, dtype=_F32, device=A.device), torch.zeros(batch, dtype=torch.int64, device=A.device)
    L, info = cholesky_factor(_batched(A.mT if upper else A))
    L = L.reshape(A.shape)
    return (L.mT if upper else L), info.reshape(batch)


_CHOL_OPS = ("gt", "eq", "bitwise_and", "where", "sqrt", "div", "mul", "sub", "tril", "amin", "stack")


@composite("linalg_cholesky_ex", "linalg_cholesky_ex.L", ir_ops=_CHOL_OPS)
def _cholesky_ex(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.cholesky(_ex) (``upper`` too): ``info`` as LAPACK's, the checked form raises PyTorch's error."""
    L, info = _cholesky(a.self, bool(a.upper))
    outs[0].copy_(L)
    outs[1].copy_(info)
    if a.check_errors:
        aten._linalg_check_errors(outs[1], "linalg.cholesky_ex", is_matrix=a.self.dim() == 2)


@composite("cholesky", "cholesky.out", ir_ops=_CHOL_OPS)
def _cholesky_legacy(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.cholesky (deprecated): the factor, raising PyTorch's error for a matrix that is not positive-definite."""
    L, info = _cholesky(a.self, bool(a.upper))
    outs[0].copy_(L)
    aten._linalg_check_errors(info.to(torch.int32), "cholesky", is_matrix=a.self.dim() == 2)


def _cholesky_solve(rhs: torch.Tensor, factor: torch.Tensor, upper: bool) -> torch.Tensor:
    """X with A X = B for A = L L^T (``factor`` = L) or U^T U (``upper``, ``factor`` = U): two substitutions.
    ``rhs`` (..., n, r) and ``factor`` (..., n, n) with the same batch shape; float32 result."""
    n, r = factor.shape[-1], rhs.shape[-1]
    if rhs.numel() == 0 or factor.numel() == 0:
        return torch.zeros(rhs.shape, dtype=_F32, device=rhs.device)
    t, y = _batched(factor), _batched(rhs)
    if upper:  # U^T (U X) = B
        y = _triangular(t, y, lower=True, unit=False, trans=True)
        y = _triangular(t, y, lower=False, unit=False, trans=False)
    else:  # L (L^T X) = B
        y = _triangular(t, y, lower=True, unit=False, trans=False)
        y = _triangular(t, y, lower=False, unit=False, trans=True)
    return y.reshape(*factor.shape[:-2], n, r)


@composite("_cholesky_solve_helper", "_cholesky_solve_helper.out", ir_ops=("div", "mul", "sub", "where"))
def _cholesky_solve_helper(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.cholesky_solve (whose broadcasting composite calls this with equal batch shapes)."""
    outs[0].copy_(_cholesky_solve(a.self, a.A, bool(a.upper)))


@composite("cholesky_inverse", "cholesky_inverse.out", ir_ops=("div", "mul", "sub", "where"))
def _cholesky_inverse(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.cholesky_inverse: A^-1 from A's Cholesky factor, as the solve of A X = I."""
    f = a.self
    eye = torch.eye(f.shape[-1], dtype=_F32, device=f.device).expand(f.shape)
    outs[0].copy_(_cholesky_solve(eye, f, bool(a.upper)))


# ---------------------------------------------------------------------------------------------------- QR
def householder_qr(a: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Householder QR of ``a`` (batch, m, n) float32 on the device, LAPACK geqr2's way: for each column ``k`` a
    reflector H_k = I - tau_k v_k v_k^T (v_k[k] = 1, zero above) with R[k, k] = beta = -sign(alpha) ||(alpha, x)||
    (the CPU's sign convention), tau_k = 0 when x (the column below the diagonal) is zero. The inner products are
    pairwise folds of exact fp32 element-wise sums. Returns (R in the upper triangle, v below it (batch, m, n);
    the reflectors v_k (batch, m) and tau_k (batch,) for k < min(m, n))."""
    m, n = a.shape[-2:]
    dev = a.device
    rows = torch.arange(m, device=dev)
    rcol = rows.unsqueeze(-1)  # (m, 1)
    cols = torch.arange(n, device=dev)
    r = a.clone()
    vs: list[torch.Tensor] = []
    taus: list[torch.Tensor] = []
    for k in range(min(m, n)):
        alpha = r[:, k, k]
        x = r[:, k + 1 :, k]
        xn2 = _fold(x * x, "add", 0.0)
        norm = (alpha * alpha + xn2).sqrt()
        house = xn2 > 0  # LAPACK dlarfg: H = I when x is zero
        beta = torch.where(house, torch.where(alpha >= 0, -norm, norm), alpha)
        tau = torch.where(house, (beta - alpha) / torch.where(house, beta, 1.0), 0.0)
        scale = torch.where(house, alpha - beta, 1.0)  # |alpha - beta| = |alpha| + norm > 0 for a reflector
        v = torch.where(rows > k, r[:, :, k] / scale.unsqueeze(-1), torch.where(rows == k, 1.0, 0.0))
        vs.append(v)
        taus.append(tau)
        packed = torch.where(rows > k, v, torch.where(rows == k, beta.unsqueeze(-1), r[:, :, k]))
        new = torch.where(cols == k, packed.unsqueeze(-1), r)
        if k < n - 1:  # H_k applied to the columns right of k: A - tau v (v^T A)
            w = _fold((v.unsqueeze(-1) * r).mT, "add", 0.0)  # (b, n): v^T A (v is zero above row k)
            upd = r - (tau.unsqueeze(-1) * v).unsqueeze(-1) * w.unsqueeze(-2)
            new = torch.where((rcol >= k) & (cols > k), upd, new)
        r = new
    return r, vs, taus


def _form_q(vs: list[torch.Tensor], taus: list[torch.Tensor], m: int, cols: int, b: int,
            device: torch.device) -> torch.Tensor:  # fmt: skip
    """Q's first ``cols`` columns (batch, m, cols) = H_0 ... H_{k-1} I, accumulated backwards (LAPACK orgqr's way)."""
    q = torch.eye(m, cols, dtype=_F32, device=device).expand(b, m, cols)
    for v, tau in zip(reversed(vs), reversed(taus)):
        w = _fold((v.unsqueeze(-1) * q).mT, "add", 0.0)  # (b, cols): v^T Q
        q = q - (tau.unsqueeze(-1) * v).unsqueeze(-1) * w.unsqueeze(-2)
    return q


@composite("linalg_qr", "linalg_qr.out",
           ir_ops=("mul", "add", "sub", "div", "sqrt", "gt", "ge", "eq", "where", "concat", "triu"))  # fmt: skip
def _linalg_qr(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.linalg.qr, modes "reduced", "complete" and "r": Householder QR with LAPACK's reflectors, so Q and R
    match the CPU's up to rounding (R's diagonal carries the signs geqrf gives it)."""
    A, mode = a.A, a.mode
    batch, (m, n) = A.shape[:-2], A.shape[-2:]
    k = min(m, n)
    qcols = m if mode == "complete" else k
    rrows = m if mode == "complete" else k
    nb = 1
    for s in batch:
        nb *= s
    if nb == 0 or m == 0 or n == 0:
        outs[1].zero_()
        if mode != "r" and outs[0].numel():
            outs[0].copy_(torch.eye(m, qcols, dtype=_F32, device=A.device).expand(*batch, m, qcols))
        return
    r, vs, taus = householder_qr(_batched(A))
    outs[1].copy_(r[:, :rrows, :].triu().reshape(*batch, rrows, n))
    if mode != "r":
        outs[0].copy_(_form_q(vs, taus, m, qcols, nb, A.device).reshape(*batch, m, qcols))
