"""The compute kernel API of the simulator: the DST register file, the FPU (unpack, math at fidelity, pack), the SFPU.

DST holds ``Kernel.dst_tiles`` tiles as float32 arrays whose values are rounded to bfloat16 on every write unless
``fp32_dest_acc_en``. ``tile_regs_acquire`` hands the math side a zeroed DST; math ops run between acquire and
commit, ``pack_tile`` between wait and release, as on the card. Unpacking reads a CB page in the CB's data format into
a source register (float32 truncated to TF32, or to BF16 with a 16-bit DST); multiplies run at the kernel's math
fidelity and a BF16 DST is rounded after every MVMUL: the rules of ``docs/concepts/numerics.md``, computed by the
card's arithmetic core (``kohakutt.hal.cardcore``, the C functions the host build of the kernel API runs too), which
``kohakutt.kernels.cardmath`` extends to whole ops (the tests check that they agree). ``pack_tile`` converts
DST to the output CB's format (bfloat16 nearest-even, block floats by the host packer's rules). Each op needs its
``*_init`` (and a hardware start-up) first, as on the card.

``FPU_MUL``, ``FPU_MATMUL`` and ``SFPU_FUNCTIONS`` are the numerics; a finer model of the card's math can replace them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from kohakutt.hal import cardcore, formats
from kohakutt.hal.backends.sim_program import _CB, KernelAPI, _Run
from kohakutt.hal.layout import TILE, Format
from kohakutt.hal.program import CoreCoord, Kernel, MathFidelity

_FLOATS = (Format.FLOAT32, Format.BFLOAT16, Format.BFLOAT8_B, Format.BFLOAT4_B)
_STARTUP = "compute_kernel_hw_startup / binary_op_init_common / unary_op_init_common / init_sfpu / mm_init"


# ------------------------------------------------------------------------------------------------------- numerics
MVMUL_K = 16  # products one MVMUL sums in FP32 before adding them to DST


def cut(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` (float32) keeping only its top ``bits`` significant bits (implicit one included), truncating."""
    mask = np.uint32((0xFFFFFFFF << (24 - bits)) & 0xFFFFFFFF)
    a = np.asarray(x, dtype=np.float32)  # (np.ascontiguousarray would make a 0-d array 1-d)
    return ((a if a.flags.c_contiguous else a.copy()).view(np.uint32) & mask).view(np.float32)


def source_register(x: np.ndarray, fp32_acc: bool) -> np.ndarray:
    """What the unpacker puts in SrcA / SrcB: float32 truncated to TF32 with an FP32 DST, to BF16 with a 16-bit one
    (bfloat16 and block-float values pass unchanged)."""
    return cardcore.source_register(x, fp32_acc)


def fidelity_pairs(srca: np.ndarray, srcb: np.ndarray, fidelity: MathFidelity, fp32_acc: bool
                   ) -> list[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """(SrcA slice, SrcB slice) per multiplier pass, in phase order (the card's arithmetic core decides the slices)."""
    return [(cardcore.fidelity_slice(srca, cardcore.SRCA, p, fp32_acc),
             cardcore.fidelity_slice(srcb, cardcore.SRCB, p, fp32_acc)) for p in range(fidelity.phases)]  # fmt: skip


def _round_bf16(x: np.ndarray) -> np.ndarray:
    return formats.round_bfloat16(np.asarray(x, dtype=np.float32))


def fpu_mul(srca: np.ndarray, srcb: np.ndarray, fidelity: MathFidelity, fp32_acc: bool) -> np.ndarray:
    """``mul_tiles``: each pass's exact product is added to DST in turn (a BF16 DST is rounded after each)."""
    return cardcore.fpu_mul(srca, srcb, fidelity.phases, fp32_acc)


def fpu_matmul(dst: np.ndarray, in0: np.ndarray, in1: np.ndarray, fidelity: MathFidelity, fp32_acc: bool
               ) -> np.ndarray:  # fmt: skip
    """``matmul_tiles``: DST + in0 @ in1, in0 in SrcB and in1 in SrcA, through the card's arithmetic core: an FP32
    DST adds the passes' products once, a BF16 DST is rounded after every MVMUL (each 16-wide K slice of each pass)."""
    return cardcore.matmul_tile(dst, in0, in1, fidelity.phases, fp32_acc)


# name -> the SFPU op of the card's arithmetic core; f(values, approx) -> float32 DST values before rounding.
SFPU_FUNCTIONS: dict[str, Callable[[np.ndarray, bool], np.ndarray]] = {
    name: functools.partial(cardcore.sfpu, op)
    for name, op in {"exp": "exp", "log": "log", "recip": "reciprocal", "sqrt": "sqrt", "rsqrt": "rsqrt",
                     "relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "sigmoid": "sigmoid", "tanh": "tanh",
                     "abs": "abs", "negative": "negative", "square": "square", "silu": "silu"}.items()
}  # fmt: skip
_SCALAR_OPS = ("add", "sub", "mul", "div", "rsub")
# The FPU's numerics, swappable for a finer model: FPU_MUL(srca, srcb, fidelity, fp32_acc) -> DST values,
# FPU_MATMUL(dst, in0, in1, fidelity, fp32_acc) -> the new DST values.
FPU_MUL = fpu_mul
FPU_MATMUL = fpu_matmul


# ---------------------------------------------------------------------------------------------------- the API
class ComputeAPI(KernelAPI):
    """The compute kernel API (the three TRISCs as one kernel): CBs, DST, FPU and SFPU tile ops."""

    def __init__(self, run: _Run, kernel: Kernel, core: CoreCoord):
        super().__init__(run, kernel, core)
        self.fidelity = kernel.fidelity
        self.fp32_dest_acc_en = kernel.fp32_dest_acc_en
        self.math_approx_mode = kernel.math_approx_mode
        self.dst_tiles = kernel.dst_tiles(run.card)
        self._dst = np.zeros((self.dst_tiles, TILE, TILE), dtype=np.float32)
        self._written = np.zeros(self.dst_tiles, dtype=bool)
        self._regs = "idle"  # idle -> math (acquired) -> committed -> pack (waited) -> idle; "full": acquire_dst
        self._started = False
        self._fpu: str | None = None
        self._sfpu: str | None = None
        self._acc_to_dest = False
        self._reduce = ("sum", "row")
        self._reduce_mask = False  # after reduce_init the packer zeroes all but the reduction's result

    # ------------------------------------------------------------------------------------------- rule checks
    def _at_end(self) -> None:
        if self._regs != "idle":
            raise self._error(f"the kernel ended holding DST ({self._regs}): every tile_regs_acquire needs "
                              "tile_regs_commit, tile_regs_wait and tile_regs_release")  # fmt: skip

    def _dst_index(self, i: int, op: str) -> int:
        if not 0 <= i < self.dst_tiles:
            mode = "full-sync" if self.kernel.dst_full_sync_en else "half-sync"
            acc = "fp32" if self.fp32_dest_acc_en else "bf16"
            raise self._error(f"{op} uses DST tile {i}, but DST holds {self.dst_tiles} tiles (0..{self.dst_tiles - 1}) "
                              f"with {acc} accumulation in {mode} mode; use fewer tiles per acquire, or "
                              "dst_full_sync_en / fp32_dest_acc_en=False for more")  # fmt: skip
        return int(i)

    def _math(self, op: str, family: str | None, init: str) -> None:
        if self._regs not in ("math", "full"):
            raise self._error(f"{op} outside tile_regs_acquire() / tile_regs_commit(): math may only write DST "
                              "while the math side holds it")  # fmt: skip
        if not self._started:
            raise self._error(f"{op} before the hardware start-up: call one of {_STARTUP} first")
        if family is not None and self._fpu != family:
            raise self._error(f"{op} needs {init} first (the FPU is set up for {self._fpu or 'nothing'})")

    def _need_cb(self, cb: int) -> _CB:
        c = self._cb(cb)
        if c.fmt not in _FLOATS:
            raise self._error(f"CB {cb} holds {c.fmt.value}; the simulator's compute models float formats only")
        if c.page_size < c.fmt.tile_bytes:
            raise self._error(f"CB {cb} has {c.page_size} B pages, less than one {c.fmt.value} tile "
                              f"({c.fmt.tile_bytes} B); compute works on whole tiles")  # fmt: skip
        return c

    def _round(self, x: np.ndarray) -> np.ndarray:
        x32 = np.asarray(x, dtype=np.float32)
        return x32 if self.fp32_dest_acc_en else formats.round_bfloat16(x32)

    def _store(self, dst: int, x: np.ndarray) -> None:
        self._dst[dst] = self._round(x)
        self._written[dst] = True

    def _unpack(self, cb: int, tile: int, op: str) -> np.ndarray:
        """Tile ``tile`` of the front of CB ``cb`` as the source register holds it (float32, 32 x 32)."""
        c = self._need_cb(cb)
        if not 0 <= tile < c.waited:
            raise self._error(f"{op} reads tile {tile} of CB {cb}, but the kernel waited for {c.waited} page(s): "
                              f"call cb_wait_front({cb}, {tile + 1}) first")  # fmt: skip
        addr = c.slot_address(c.popped + tile)
        values = formats.unpack(self._core.l1[addr : addr + c.fmt.tile_bytes], (TILE, TILE), c.fmt)
        return source_register(values, self.fp32_dest_acc_en)

    def _pack(self, values: np.ndarray, cb: int, tile: int, op: str) -> None:
        c = self._need_cb(cb)
        if not 0 <= tile < c.reserved:
            raise self._error(f"{op} writes tile {tile} of CB {cb}, but the kernel reserved {c.reserved} page(s): "
                              f"call cb_reserve_back({cb}, {tile + 1}) first")  # fmt: skip
        addr = c.slot_address(c.pushed + tile)
        self._core.l1[addr : addr + c.fmt.tile_bytes] = formats.pack(values, c.fmt)

    # ---------------------------------------------------------------------------------------- DST handshakes
    def tile_regs_acquire(self) -> None:
        """Math side: take DST (zeroed) for writing."""
        with self._locked():
            if self._regs != "idle":
                raise self._error(f"tile_regs_acquire while DST is {self._regs}: release it first")
            self._dst[:] = 0.0
            self._written[:] = False
            self._regs = "math"

    def tile_regs_commit(self) -> None:
        """Math side: hand DST to the packer."""
        with self._locked():
            if self._regs != "math":
                raise self._error(f"tile_regs_commit while DST is {self._regs}: call tile_regs_acquire first")
            self._regs = "committed"

    def tile_regs_wait(self) -> None:
        """Pack side: wait for the math side's commit."""
        with self._locked():
            if self._regs != "committed":
                raise self._error(f"tile_regs_wait while DST is {self._regs}: the math side must tile_regs_commit "
                                  "first")  # fmt: skip
            self._regs = "pack"

    def tile_regs_release(self) -> None:
        """Pack side: give DST back to the math side."""
        with self._locked():
            if self._regs != "pack":
                raise self._error(f"tile_regs_release while DST is {self._regs}: call tile_regs_wait first")
            self._regs = "idle"

    def acquire_dst(self) -> None:
        """The older single call for acquire + wait (math and pack both hold DST until ``release_dst``)."""
        with self._locked():
            if self._regs != "idle":
                raise self._error(f"acquire_dst while DST is {self._regs}: release it first")
            self._dst[:] = 0.0
            self._written[:] = False
            self._regs = "full"

    def release_dst(self) -> None:
        with self._locked():
            if self._regs != "full":
                raise self._error(f"release_dst while DST is {self._regs}: call acquire_dst first")
            self._regs = "idle"

    # ------------------------------------------------------------------------------------------------- inits
    def _startup(self, *cbs: int | None, fpu: str | None = None) -> None:
        with self._locked():
            for cb in cbs:
                if cb is not None:
                    self._cb(cb)
            self._started = True
            if fpu is not None:
                self._fpu = fpu
                self._reduce_mask = fpu == "reduce"

    def compute_kernel_hw_startup(self, icb0: int, icb1: int, ocb: int | None = None) -> None:
        """Configure unpack, math and pack once at the start of the kernel."""
        self._startup(icb0, icb1, ocb)

    def binary_op_init_common(self, icb0: int, icb1: int, ocb: int) -> None:
        self._startup(icb0, icb1, ocb)

    def unary_op_init_common(self, icb: int, ocb: int) -> None:
        self._startup(icb, ocb, fpu="copy")

    def init_sfpu(self, icb: int, ocb: int) -> None:
        self._startup(icb, ocb, fpu="copy")

    def mm_init(self, in0_cb: int, in1_cb: int, out_cb: int, transpose: int = 0) -> None:
        self._startup(in0_cb, in1_cb, out_cb, fpu="matmul")

    def reduce_init(self, icb: int, icb_scaler: int, ocb: int, pool: str = "sum", dim: str = "row") -> None:
        """Set up ``reduce_tile``: ``pool`` is sum / avg / max, ``dim`` is row (over W), col (over H) or scalar."""
        if pool not in ("sum", "avg", "max") or dim not in ("row", "col", "scalar"):
            raise self._error(f"reduce_init(pool={pool!r}, dim={dim!r}): pool is sum/avg/max, dim row/col/scalar")
        self._startup(icb, icb_scaler, ocb, fpu="reduce")
        self._reduce = (pool, dim)

    def transpose_wh_init(self, icb: int, ocb: int) -> None:
        self._startup(icb, ocb, fpu="transpose")

    def tilize_init(self, icb: int, block: int, ocb: int) -> None:
        self._startup(icb, ocb, fpu="tilize")

    def untilize_init(self, icb: int, ocb: int | None = None) -> None:
        self._startup(icb, ocb, fpu="untilize")

    def _short_init(self, fpu: str, *cbs: int) -> None:
        with self._locked():
            for cb in cbs:
                self._cb(cb)
            self._fpu = fpu
            self._reduce_mask = False

    def copy_tile_init(self, cb: int) -> None:
        self._short_init("copy", cb)

    copy_tile_to_dst_init_short = copy_tile_init

    def add_tiles_init(self, icb0: int, icb1: int, acc_to_dest: bool = False) -> None:
        self._short_init("add", icb0, icb1)
        self._acc_to_dest = bool(acc_to_dest)

    def sub_tiles_init(self, icb0: int, icb1: int, acc_to_dest: bool = False) -> None:
        self._short_init("sub", icb0, icb1)
        self._acc_to_dest = bool(acc_to_dest)

    def mul_tiles_init(self, icb0: int, icb1: int) -> None:
        self._short_init("mul", icb0, icb1)
        self._acc_to_dest = False

    def mm_init_short(self, in0_cb: int, in1_cb: int, transpose: int = 0) -> None:
        self._short_init("matmul", in0_cb, in1_cb)

    # ------------------------------------------------------------------------------------------------ FPU ops
    def copy_tile(self, cb: int, tile: int, dst: int) -> None:
        """DST[dst] = tile ``tile`` of the front of CB ``cb``."""
        with self._locked():
            self._math("copy_tile", "copy", f"copy_tile_init({cb})")
            d = self._dst_index(dst, "copy_tile")
            self._store(d, self._unpack(cb, tile, "copy_tile"))

    def _binary(self, op: str, icb0: int, icb1: int, i0: int, i1: int, dst: int) -> None:
        with self._locked():
            self._math(f"{op}_tiles", op, f"{op}_tiles_init({icb0}, {icb1})")
            d = self._dst_index(dst, f"{op}_tiles")
            a = self._unpack(icb0, i0, f"{op}_tiles")
            b = self._unpack(icb1, i1, f"{op}_tiles")
            r = a + b if op == "add" else a - b if op == "sub" else FPU_MUL(a, b, self.fidelity, self.fp32_dest_acc_en)
            if self._acc_to_dest:
                r = r + self._dst[d]
            self._store(d, r)

    def add_tiles(self, icb0: int, icb1: int, itile0: int, itile1: int, idst: int) -> None:
        """DST[idst] = in0 tile + in1 tile."""
        self._binary("add", icb0, icb1, itile0, itile1, idst)

    def sub_tiles(self, icb0: int, icb1: int, itile0: int, itile1: int, idst: int) -> None:
        """DST[idst] = in0 tile - in1 tile."""
        self._binary("sub", icb0, icb1, itile0, itile1, idst)

    def mul_tiles(self, icb0: int, icb1: int, itile0: int, itile1: int, idst: int) -> None:
        """DST[idst] = in0 tile * in1 tile, at the kernel's math fidelity."""
        self._binary("mul", icb0, icb1, itile0, itile1, idst)

    def matmul_tiles(self, in0_cb: int, in1_cb: int, in0_tile: int, in1_tile: int, idst: int,
                     transpose: int = 0) -> None:  # fmt: skip
        """DST[idst] += in0 tile @ in1 tile (in1 transposed when ``transpose``), at the kernel's math fidelity."""
        with self._locked():
            self._math("matmul_tiles", "matmul", f"mm_init_short({in0_cb}, {in1_cb}) (or mm_init)")
            d = self._dst_index(idst, "matmul_tiles")
            a = self._unpack(in0_cb, in0_tile, "matmul_tiles")
            b = self._unpack(in1_cb, in1_tile, "matmul_tiles")
            b = np.ascontiguousarray(b.T) if transpose else b
            self._store(d, FPU_MATMUL(self._dst[d], a, b, self.fidelity, self.fp32_dest_acc_en))

    def reduce_tile(self, icb: int, icb_scaler: int, itile: int, itile_scaler: int, idst: int,
                    pool: str | None = None, dim: str | None = None) -> None:  # fmt: skip
        """Reduce a tile (times the scaler tile's first value) into DST[idst]: row -> column 0, col -> row 0,
        scalar -> element (0, 0); sums accumulate, max keeps the larger."""
        with self._locked():
            self._math("reduce_tile", "reduce", f"reduce_init({icb}, {icb_scaler}, ...)")
            want = (pool or self._reduce[0], dim or self._reduce[1])
            if want != self._reduce:
                raise self._error(f"reduce_tile{want} but reduce_init set up {self._reduce}")
            d = self._dst_index(idst, "reduce_tile")
            x = self._unpack(icb, itile, "reduce_tile")
            scaler = self._unpack(icb_scaler, itile_scaler, "reduce_tile")[0, 0]
            pool_, dim_ = self._reduce
            self._store(d, cardcore.reduce_tile(self._dst[d], x, scaler, pool_, dim_, self.fidelity.phases,
                                                self.fp32_dest_acc_en, not self._written[d]))  # fmt: skip

    def transpose_wh_tile(self, icb: int, itile: int, idst: int) -> None:
        """DST[idst] = the tile transposed."""
        with self._locked():
            self._math("transpose_wh_tile", "transpose", f"transpose_wh_init({icb}, ...)")
            d = self._dst_index(idst, "transpose_wh_tile")
            self._store(d, self._unpack(icb, itile, "transpose_wh_tile").T)

    # --------------------------------------------------------------------------------------------------- pack
    def pack_tile(self, idst: int, ocb: int, output_tile_index: int = 0) -> None:
        """Write DST[idst] into reserved page ``output_tile_index`` of CB ``ocb``, in the CB's data format."""
        with self._locked():
            if self._regs not in ("pack", "full"):
                raise self._error("pack_tile outside tile_regs_wait() / tile_regs_release(): the packer may only "
                                  "read DST after the math side commits it")  # fmt: skip
            d = self._dst_index(idst, "pack_tile")
            values = self._dst[d]
            if self._reduce_mask:  # 0.81.1's reduce.h: the packer writes zeros outside the reduction's result
                region = {"row": (slice(None), 0), "col": (0, slice(None)), "scalar": (0, 0)}[self._reduce[1]]
                values = np.zeros_like(values)
                values[region] = self._dst[d][region]
            self._pack(values, ocb, output_tile_index, "pack_tile")

    # --------------------------------------------------------------------------------------- tilize/untilize
    def _block(self, c: _CB, block: int, start: int, op: str) -> None:
        if (start % c.num_pages) + block > c.num_pages:
            raise self._error(f"{op} of {block} pages of CB {c.index} starts at page slot {start % c.num_pages} of "
                              f"{c.num_pages}, so the block wraps the ring's end; make num_pages a multiple of "
                              "the block")  # fmt: skip

    def tilize_block(self, icb: int, block: int, ocb: int) -> None:
        """``block`` tiles' worth of row-major rows (32 x block*32) at the front of ``icb`` -> ``block`` tiles."""
        with self._locked():
            self._tilize_check("tilize_block", "tilize", f"tilize_init({icb}, {block}, {ocb})")
            src, dst = self._need_cb(icb), self._need_cb(ocb)
            if src.fmt not in (Format.BFLOAT16, Format.FLOAT32):
                raise self._error(f"tilize_block reads row-major {src.fmt.value}, which has no row-major form")
            self._window(src, block, "tilize_block", waited=True)
            self._window(dst, block, "tilize_block", waited=False)
            self._block(src, block, src.popped, "tilize_block")
            addr = src.slot_address(src.popped)
            raw = self._core.l1[addr : addr + block * src.fmt.tile_bytes]
            rows = (formats.from_bfloat16(raw.view(np.uint16)) if src.fmt is Format.BFLOAT16
                    else raw.view(np.float32)).reshape(TILE, block * TILE)  # fmt: skip
            for t in range(block):
                self._pack(self._round(rows[:, t * TILE : (t + 1) * TILE]), ocb, t, "tilize_block")

    def untilize_block(self, icb: int, block: int, ocb: int) -> None:
        """``block`` tiles at the front of ``icb`` -> their rows (32 x block*32, row-major) in ``ocb``."""
        with self._locked():
            self._tilize_check("untilize_block", "untilize", f"untilize_init({icb}, {ocb})")
            src, dst = self._need_cb(icb), self._need_cb(ocb)
            if dst.fmt not in (Format.BFLOAT16, Format.FLOAT32):
                raise self._error(f"untilize_block writes row-major {dst.fmt.value}, which has no row-major form")
            self._window(src, block, "untilize_block", waited=True)
            self._window(dst, block, "untilize_block", waited=False)
            self._block(dst, block, dst.pushed, "untilize_block")
            rows = np.concatenate([self._round(self._unpack(icb, t, "untilize_block")) for t in range(block)], axis=1)
            raw = (formats.to_bfloat16(rows) if dst.fmt is Format.BFLOAT16 else rows.astype(np.float32)).view(np.uint8)
            addr = dst.slot_address(dst.pushed)
            self._core.l1[addr : addr + raw.size] = raw.reshape(-1)

    def _tilize_check(self, op: str, family: str, init: str) -> None:
        if self._regs != "idle":
            raise self._error(f"{op} manages DST itself: call it outside tile_regs_acquire / tile_regs_release")
        if self._fpu != family:
            raise self._error(f"{op} needs {init} first (the FPU is set up for {self._fpu or 'nothing'})")

    def _window(self, c: _CB, block: int, op: str, *, waited: bool) -> None:
        have, call = (c.waited, "cb_wait_front") if waited else (c.reserved, "cb_reserve_back")
        if block > have:
            raise self._error(f"{op} needs {block} pages of CB {c.index} but the kernel has {have}: call "
                              f"{call}({c.index}, {block}) first")  # fmt: skip

    # --------------------------------------------------------------------------------------------------- SFPU
    def _sfpu_init(self, name: str) -> None:
        with self._locked():
            self._sfpu = name

    def _sfpu_op(self, name: str, dst: int, fn: Callable[[np.ndarray], np.ndarray], init: str) -> None:
        with self._locked():
            self._math(f"{name}_tile", None, "")
            if self._sfpu != init:
                call = "binop_with_scalar_tile_init()" if init == "binop_scalar" else f"{init}_tile_init()"
                raise self._error(f"{name}_tile needs {call} first (the SFPU is set up for "
                                  f"{self._sfpu or 'nothing'})")  # fmt: skip
            d = self._dst_index(dst, f"{name}_tile")
            self._store(d, fn(self._dst[d]))

    def _unary(self, name: str, dst: int, approx: bool | None = None) -> None:
        f = SFPU_FUNCTIONS[name]
        mode = self.math_approx_mode if approx is None else approx
        self._sfpu_op(name, dst, lambda x: f(x, mode), name)

    def _scalar(self, name: str, dst: int, bits: int) -> None:
        s = float(np.uint32(bits & 0xFFFFFFFF).view(np.float32))
        self._sfpu_op(f"{name}_unary", dst, lambda x: cardcore.sfpu(name, x, param=s), "binop_scalar")

    def exp_tile_init(self) -> None:
        self._sfpu_init("exp")

    def exp_tile(self, idst: int) -> None:
        self._unary("exp", idst)

    def log_tile_init(self) -> None:
        self._sfpu_init("log")

    def log_tile(self, idst: int) -> None:
        self._unary("log", idst)

    def recip_tile_init(self) -> None:
        self._sfpu_init("recip")

    def recip_tile(self, idst: int) -> None:
        self._unary("recip", idst)

    def sqrt_tile_init(self) -> None:
        self._sfpu_init("sqrt")

    def sqrt_tile(self, idst: int) -> None:
        self._unary("sqrt", idst)

    def rsqrt_tile_init(self) -> None:
        self._sfpu_init("rsqrt")

    def rsqrt_tile(self, idst: int) -> None:
        self._unary("rsqrt", idst)

    def relu_tile_init(self) -> None:
        self._sfpu_init("relu")

    def relu_tile(self, idst: int) -> None:
        self._unary("relu", idst)

    def gelu_tile_init(self) -> None:
        self._sfpu_init("gelu")

    def gelu_tile(self, idst: int, approx: bool | None = None) -> None:
        """GELU: the erf form; in approximate mode (``approx``, default the kernel's) the card's LUT."""
        self._unary("gelu", idst, approx)

    def gelu_tanh_tile_init(self) -> None:
        self._sfpu_init("gelu_tanh")

    def gelu_tanh_tile(self, idst: int, approx: bool | None = None) -> None:
        """GELU, tanh form (exact; the LUT in approximate mode)."""
        self._unary("gelu_tanh", idst, approx)

    def silu_tile_init(self) -> None:
        self._sfpu_init("silu")

    def silu_tile(self, idst: int) -> None:
        self._unary("silu", idst)

    def sigmoid_tile_init(self) -> None:
        self._sfpu_init("sigmoid")

    def sigmoid_tile(self, idst: int) -> None:
        self._unary("sigmoid", idst)

    def tanh_tile_init(self) -> None:
        self._sfpu_init("tanh")

    def tanh_tile(self, idst: int) -> None:
        self._unary("tanh", idst)

    def abs_tile_init(self) -> None:
        self._sfpu_init("abs")

    def abs_tile(self, idst: int) -> None:
        self._unary("abs", idst)

    def negative_tile_init(self) -> None:
        self._sfpu_init("negative")

    def negative_tile(self, idst: int) -> None:
        self._unary("negative", idst)

    def square_tile_init(self) -> None:
        self._sfpu_init("square")

    def square_tile(self, idst: int) -> None:
        self._unary("square", idst)

    def binop_with_scalar_tile_init(self) -> None:
        """Set up the SFPU for ``add/sub/mul/div/rsub_unary_tile``."""
        self._sfpu_init("binop_scalar")

    def add_unary_tile(self, idst: int, param: int) -> None:
        """DST[idst] += the float whose fp32 bits are ``param``."""
        self._scalar("add", idst, param)

    def sub_unary_tile(self, idst: int, param: int) -> None:
        self._scalar("sub", idst, param)

    def mul_unary_tile(self, idst: int, param: int) -> None:
        """DST[idst] *= the float whose fp32 bits are ``param``."""
        self._scalar("mul", idst, param)

    def div_unary_tile(self, idst: int, param: int) -> None:
        self._scalar("div", idst, param)

    def rsub_unary_tile(self, idst: int, param: int) -> None:
        self._scalar("rsub", idst, param)


__all__ = [
    "FPU_MATMUL", "FPU_MUL", "SFPU_FUNCTIONS", "ComputeAPI", "cut", "fidelity_pairs", "fpu_matmul", "fpu_mul",
    "source_register",
]  # fmt: skip
