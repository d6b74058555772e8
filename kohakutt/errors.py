"""The error types. Every error says what was wrong and what to do next, and leaves the device usable."""

from __future__ import annotations


class KohakuTTError(RuntimeError):
    """Base of every Kohaku-TT error."""


class ConfigError(KohakuTTError, ValueError):
    """A ``KTT_*`` knob or an argument has a value that cannot be used."""


class FormatError(KohakuTTError, ValueError):
    """An unknown data format or layout, or data that does not fit the one named."""


class DeviceError(KohakuTTError):
    """A device cannot be opened, is closed, or was used in a way its state does not allow."""


class BackendUnavailable(DeviceError):
    """The requested backend cannot run here (no card, no TT-NN); the message says why."""


class OutOfMemoryError(KohakuTTError, MemoryError):
    """An allocation does not fit; the message names the request and the allocator's statistics."""


class BufferUseError(KohakuTTError):
    """A buffer was used after it was freed, or with a size, layout or format it does not have."""


class CommandError(KohakuTTError):
    """A queued command failed; raised at the next synchronizing call, naming the command."""

    def __init__(self, command: str, cause: BaseException):
        self.command = command
        self.cause = cause
        super().__init__(f"queued command {command!r} failed: {type(cause).__name__}: {cause}")


class TraceError(KohakuTTError):
    """A trace was misused: captured twice, replayed with buffers that do not match, or used after release."""


class ProgramError(KohakuTTError):
    """A program breaks a rule of the hardware (circular buffers, L1 size, kernel arguments)."""


class KernelDSLError(ProgramError):
    """A kernel DSL program (``kohakutt.dsl.metal``) breaks a rule of the card or of the DSL; the message starts with
    the DSL line (``file.py:12: ...``), kept as ``file`` and ``line``."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.file, self.line = file, line


class KohakuTTUnsupportedOperator(KohakuTTError, NotImplementedError):
    """An op has no implementation on the device; the message says how to opt in to the CPU fallback."""


class DtypeError(KohakuTTError, TypeError):
    """A dtype the card cannot hold, under a policy that says to raise."""


class IntegerOverflowError(KohakuTTError, OverflowError):
    """An integer value would be lost: a number outside the dtype it meets, or an int64 operand or result outside
    the int32 range an op computes in on the card (docs/concepts/numerics.md, "Integers"). Not a TypeError, so
    torch's ``tensor * number`` operators let it through instead of turning it into a bare TypeError."""


class IndexOutOfRangeError(KohakuTTError, IndexError):
    """An index operand points outside the tensor it indexes; the message names the op, the index and the size."""
