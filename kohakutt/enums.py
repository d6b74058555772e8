"""Named choices: the string enums of formats, layouts, memory kinds and dtypes, each with one ``of``."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self


class Choice(StrEnum):
    """A string enum whose :meth:`of` takes a member or its value and raises the class's typed error, naming the
    choices, for anything else. A subclass says which: ``class Format(Choice, error=FormatError, message="unknown
    format {value!r}; use one of {choices}")``."""

    def __init_subclass__(cls, error: type[Exception] = ValueError, message: str = "", **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._refusal = (error, message or "unknown value {value!r}; use one of {choices}")

    @classmethod
    def of(cls, value: Self | str) -> Self:
        try:
            return cls(value)
        except ValueError:
            error, message = cls._refusal
            raise error(message.format(value=value, choices=", ".join(m.value for m in cls))) from None
