"""What a code object does and what it reads, as :mod:`.fingerprint` needs them: a digest of
the code that does not change with where it was written or how it was compiled
(:func:`code_token`), and the globals and imported modules' attributes it and the code
nested in it read (:func:`global_reads`). Both are cached per code object."""

from __future__ import annotations
import __future__

import dis
import functools
import hashlib
import inspect
import types
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["IMPORTED", "SCALARS", "code_token", "global_reads", "scalar_token"]

_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
_ATTRIBUTES = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_LOCAL_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_DEREF"})
_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"})
#: The first name of a read that starts at a module the code imports, not at a global.
IMPORTED = ""
# Flags that say how the code was compiled (a replay's block is nested in a function, a
# cell may have seen a __future__ import), not what it does.
_COMPILE_FLAGS = functools.reduce(
    lambda flags, name: flags | getattr(__future__, name).compiler_flag,
    __future__.all_feature_names,
    0,
)
# Instructions that say how a name or a call was compiled rather than what the code does:
# in a replay's program, compiled whole inside a function, a global may be read as a free
# variable and a module's attribute call is no method call. The shape of the code leaves
# them out (and unifies the loads), so that it is the same in a cell and in a replay.
_HOW_COMPILED = frozenset(
    {
        "CACHE", "NOP", "RESUME", "PUSH_NULL", "PRECALL", "COPY_FREE_VARS", "MAKE_CELL",
        "KW_NAMES", "EXTENDED_ARG",
    }
)  # fmt: skip
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_SHAPES = {
    **dict.fromkeys(_LOADS | _LOCAL_LOADS | {"LOAD_CLOSURE", "LOAD_CLASSDEREF"}, "LOAD"),
    **dict.fromkeys(_ATTRIBUTES, "LOAD_ATTR"),
    **dict.fromkeys(("CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_KW"), "CALL"),
}
#: Scalars: fingerprinted by type and value (a long str or bytes by its hash).
SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), type(NotImplemented))

_CODES: weakref.WeakKeyDictionary[types.CodeType, str] = weakref.WeakKeyDictionary()
_READS: weakref.WeakKeyDictionary[types.CodeType, tuple[tuple[str, ...], ...]] = (
    weakref.WeakKeyDictionary()
)


def scalar_token(value: Any) -> str:
    """The token of a value of ``SCALARS``: its type and repr, or a long text's hash."""
    if type(value) in (str, bytes) and len(value) > 64:  # long texts: their hash
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        return f"{type(value).__name__}#{hashlib.sha256(data).hexdigest()}"
    return f"{type(value).__name__}:{value!r}"


def code_token(code: types.CodeType) -> str:
    """A digest of what ``code`` does, cached per code object: its source text when it can
    be read, else its bytecode, and either way its names, constants and nested code.

    The source first: the same text compiles to other bytecode in a cell (each top-level
    statement compiled alone) than in a replay's program (compiled whole: a call of a module
    imported in it is compiled as a plain attribute call, not a method call). Code made with
    ``exec`` has no source, and compiles to the same bytecode wherever ``exec`` runs.
    """
    found = _CODES.get(code)
    if found is None:
        try:
            text = "source:" + inspect.getsource(code)
        except Exception:  # OSError (no source, as with exec), TypeError; tokenize's errors
            text = f"bytecode:{code.co_code.hex()}:{getattr(code, 'co_exceptiontable', b'').hex()}"
        parts = [
            text,
            # The source comes from linecache by file name, and a name may hold another
            # source than the one this code was compiled from (every exec's "<string>", a
            # replay's file compiled again): the shape of the code itself goes in too.
            _shape(code),
            code.co_name,
            f"{code.co_argcount},{code.co_posonlyargcount},{code.co_kwonlyargcount}",
            str(code.co_flags & ~_COMPILE_FLAGS),
            ",".join(code.co_names),
            ",".join(code.co_varnames),
            ",".join(code.co_freevars),
            ",".join(code.co_cellvars),
            *map(_constant, code.co_consts),
        ]
        found = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
        _CODES[code] = found
    return found


def _shape(code: types.CodeType) -> str:
    """The instructions of ``code`` without what only says how it was compiled."""
    shape = []
    for instruction in dis.get_instructions(code):
        name = instruction.opname
        if name in _HOW_COMPILED:
            continue
        name = _SHAPES.get(name, name)
        if name in ("LOAD", "LOAD_ATTR", "CALL") or instruction.opname in _STORES:
            shape.append(name)  # their arguments are indexes the compile decides
        elif instruction.opcode in _JUMPS:
            shape.append(name)  # an offset, which the instructions left out move
        elif isinstance(instruction.argval, (int, str)):
            shape.append(f"{name}:{instruction.argval}")
        else:
            shape.append(name)
    return " ".join(shape)


def _constant(value: Any) -> str:
    if isinstance(value, types.CodeType):
        return code_token(value)
    if type(value) is tuple:
        return f"tuple({','.join(map(_constant, value))})"
    if type(value) is frozenset:
        return f"frozenset({','.join(sorted(map(_constant, value)))})"
    return scalar_token(value) if type(value) in SCALARS else repr(value)


def global_reads(code: types.CodeType) -> tuple[tuple[str, ...], ...]:
    """The globals and imported modules that ``code`` and the code nested in it read, each
    with the attributes read right after it (``config.RATE`` is ``("config", "RATE")``),
    cached per code object."""
    found = _READS.get(code)
    if found is None:
        chains: dict[tuple[str, ...], None] = {}
        for inner in _nested(code):
            chains.update(dict.fromkeys(_reads_of(inner)))
        found = _READS[code] = tuple(chains)
    return found


def _reads_of(code: types.CodeType) -> Iterator[tuple[str, ...]]:
    """The reads of one code object's own instructions: a global, or a module it imports
    (``from config import RATE`` is ``(IMPORTED, "config", "RATE")``, and so is a later
    ``config.RATE`` after ``import config``), followed by the attributes read from it."""
    aliases: dict[str, tuple[str, ...]] = {}  # the local names an import bound
    imported: tuple[str, ...] = ()  # the module the last import instruction left
    binding: tuple[str, ...] | None = None  # what the next store binds to a name
    chain: list[str] | None = None
    previous: Any = None
    for instruction in dis.get_instructions(code):
        opname, argval = instruction.opname, instruction.argval
        if chain is not None and opname in _ATTRIBUTES:
            chain.append(argval)
            continue
        if chain is not None:
            yield tuple(chain)
            chain = None
        if opname in _LOADS:
            chain = [argval]
        elif opname in _LOCAL_LOADS:
            local = argval[-1] if isinstance(argval, tuple) else argval  # LOAD_FAST_LOAD_FAST
            chain = list(aliases[local]) if local in aliases else None
        elif opname == "IMPORT_NAME":
            # ``import a.b`` leaves the package ``a`` (``as c`` then takes ``b`` from it);
            # ``from a.b import c`` leaves ``a.b``.
            whole = previous.opname == "LOAD_CONST" and isinstance(previous.argval, tuple)
            imported = binding = (IMPORTED, argval if whole else argval.partition(".")[0])
            plain = not whole
        elif opname == "IMPORT_FROM" and imported:
            binding = (*(binding if plain and binding else imported), argval)
            yield binding
        elif opname in _STORES:
            if binding is not None:
                aliases[argval] = binding
            else:
                aliases.pop(argval, None)
            binding = None
        previous = instruction
    if chain is not None:
        yield tuple(chain)


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _nested(constant)
