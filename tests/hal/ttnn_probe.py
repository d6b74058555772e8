"""Checks names and keyword arguments against an installed ``ttnn``; runs in the TT-NN venv's Python (3.12).

Standard library only, and no Kohaku-TT import: the request comes as JSON on stdin, the answer goes as JSON to stdout.

Request: ``{"names": [dotted path, ...], "signatures": {dotted path: [keyword, ...]},
"bind_probes": {dotted path: {keyword: value}}}``. Answer: ``{"version", "missing": {path: why},
"signatures": {path: {"ok", "rejected", "doc_only", "sources", "overloads"}}, "bind_probes": {path: {...}}}``.

A callable's keywords come from what the package declares: ``inspect.signature`` for Python functions, nanobind's
``__nb_signature__`` (one entry per overload) for C++ bindings, TT-NN's operation wrappers unwrapped to the bound
C++ callable, class constructors through ``__init__``. A keyword is accepted when one overload takes all of them
together. Some bindings declare a shorter signature than they take (``open_device`` leaves out
``num_command_queues``); keywords found only in the docstring's ``Args:`` sections are reported as ``doc_only``,
and a bind probe can settle them by calling the function where that is harmless (no card: the call fails after the
arguments were bound, with a RuntimeError instead of a TypeError).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import sys
from typing import Any

_DOC_ARG = re.compile(r"^\s+\**(\w+)\s*\([^)]*\)\s*:")
_SIG_LINE = re.compile(r"^\s*(?:def\s+)?(\w+)\((.*)\)(?:\s*->.*)?$")


def split_params(text: str) -> list[str]:
    """Split a parameter list at its top-level commas (brackets, parentheses and quotes nest)."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def parse_signature(text: str) -> dict[str, Any]:
    """One overload from a signature line such as ``def f(a: int, /, b: T = \\0, *, c: U) -> R``: the names that
    can be passed by keyword, and whether it takes ``**kwargs``."""
    m = _SIG_LINE.match(text.replace("\\", "").strip())
    if not m:
        raise ValueError(f"not a signature line: {text!r}")
    params = split_params(m.group(2))
    names: list[str] = []
    var_kw = False
    if "/" in params:  # everything before it is positional-only
        params = params[params.index("/") + 1 :]
    for p in params:
        name = re.split(r"[:=]", p, maxsplit=1)[0].strip()
        if name.startswith("**"):
            var_kw = True
        elif name.startswith("*") or not name or name == "self":
            continue
        else:
            names.append(name)
    return {"names": names, "var_kw": var_kw}


def doc_args(doc: str | None) -> list[str]:
    """Names documented as ``name (type): ...`` lines (Google-style ``Args:`` / ``Keyword Args:`` sections)."""
    return [m.group(1) for line in (doc or "").splitlines() if (m := _DOC_ARG.match(line))]


def resolve(root: Any, path: str) -> Any:
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def overloads(obj: Any) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(overloads, documented names, where each came from) of a callable, class or TT-NN operation."""
    docs = [getattr(obj, "__doc__", None)]
    sources = []
    target = obj
    if isinstance(obj, type):
        target = obj.__init__
        sources.append("__init__")
    elif type(obj).__name__ == "FastOperation" and hasattr(obj, "function"):
        target = obj.function  # TT-NN's Python wrapper around the bound operation
        sources.append("operation wrapper")
    docs.append(getattr(target, "__doc__", None))
    found: list[dict[str, Any]] = []
    nb = getattr(target, "__nb_signature__", None) or getattr(type(target).__call__, "__nb_signature__", None)
    if nb and not inspect.isfunction(target):
        found = [parse_signature(entry[0]) for entry in nb]
        sources.append("__nb_signature__")
        if getattr(type(target).__call__, "__nb_signature__", None) is nb:
            docs.append(type(target).__call__.__doc__)
    else:
        try:
            sig = inspect.signature(target)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            names = [
                p.name
                for p in sig.parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
            ]
            var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
            found = [{"names": names, "var_kw": var_kw}]
            sources.append("inspect.signature")
    if not found:  # last resort: signature lines at the top of the docstring
        for d in docs:
            for line in (d or "").splitlines():
                if _SIG_LINE.match(line.replace("\\", "").strip()) and "(" in line:
                    with contextlib.suppress(ValueError):
                        found.append(parse_signature(line))
        if found:
            sources.append("docstring signature")
    documented = sorted({n for d in docs for n in doc_args(d)})
    return found, documented, sources


def check_signature(obj: Any, wanted: list[str]) -> dict[str, Any]:
    found, documented, sources = overloads(obj)
    best: list[str] | None = None
    for ov in found:
        if ov["var_kw"]:
            return {"ok": True, "rejected": [], "doc_only": [], "sources": sources, "overloads": len(found)}
        missing = [w for w in wanted if w not in ov["names"]]
        if best is None or len(missing) < len(best):
            best = missing
    best = list(wanted) if best is None else best
    doc_only = [w for w in best if w in documented]
    rejected = [w for w in best if w not in documented]
    return {"ok": not rejected, "rejected": rejected, "doc_only": doc_only, "sources": sources, "overloads": len(found)}


def card_answers(ttnn: Any) -> bool:
    try:
        return int(ttnn.GetNumAvailableDevices()) > 0
    except Exception:
        return False


def bind_probe(ttnn: Any, path: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Call ``path(**kwargs)`` on a machine with no card: a TypeError means the binding refused the keywords."""
    if card_answers(ttnn):
        return {"ran": False, "why": "a card answered; not opening it from a contract test"}
    try:
        result = resolve(ttnn, path)(**kwargs)
    except TypeError as e:
        return {"ran": True, "bound": False, "error": str(e).splitlines()[0]}
    except Exception as e:
        return {"ran": True, "bound": True, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
    if path in ("open_device", "open_mesh_device"):
        ttnn.close_device(result)
    return {"ran": True, "bound": True, "error": ""}


def main() -> int:
    request = json.load(sys.stdin)
    # TT-Metal's C++ logger may write to fd 1: keep stdout for the answer alone.
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    import ttnn

    try:
        from importlib.metadata import version

        ver = version("ttnn")
    except Exception:
        ver = getattr(ttnn, "__version__", "?")
    missing: dict[str, str] = {}
    for path in request.get("names", []):
        try:
            resolve(ttnn, path)
        except AttributeError as e:
            missing[path] = str(e)
    sigs: dict[str, Any] = {}
    for path, wanted in request.get("signatures", {}).items():
        try:
            obj = resolve(ttnn, path)
        except AttributeError as e:
            sigs[path] = {"ok": False, "rejected": list(wanted), "doc_only": [], "sources": [], "error": str(e)}
            continue
        sigs[path] = check_signature(obj, list(wanted))
    probes = {path: bind_probe(ttnn, path, kw) for path, kw in request.get("bind_probes", {}).items()}
    sys.stdout.flush()
    os.dup2(answer_fd, 1)
    json.dump({"version": ver, "missing": missing, "signatures": sigs, "bind_probes": probes}, sys.stdout)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
