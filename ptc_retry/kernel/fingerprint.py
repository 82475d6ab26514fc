"""What a ``@ptc_retry.recorded`` call's result can depend on besides its arguments, as the
digests a replay compares before it gives the call a recorded result.

- :func:`code_digest`: the function's code: its source text (its bytecode when it has no
  source, as a function made with ``exec``), its names and constants, and the same of the
  code nested in it; not where it was written, so the same definition in a cell and in a
  replay's program (at other lines) has the same digest.
- :func:`reads_digest`: the values the function reads when it is called: the globals its
  code names (with the module attributes it names, ``config.RATE``, also of a module it
  imports itself), its closure cells, the object a method is bound to; and, for the
  functions and classes of the program's own namespace that it reads, their code and what
  they read in turn.

The rule is "when in doubt, go live": a value that cannot be fingerprinted makes
``reads_digest`` None, and such a call is never given a recorded result. Fingerprinted:

- None, bools, numbers, strings, bytes, and tuples, lists, dicts, sets, frozensets and
  ``types.SimpleNamespace`` of such values, by value and type (a subclass written in
  Python, such as a namedtuple, with its class and attributes);
- modules by name (the attributes the code names are read and fingerprinted themselves);
- a function, class or other callable that an imported module defines under its own name
  (``json.dumps``, ``math.sqrt``, ``numpy.mean``) by that name: imported modules are
  trusted not to change under a program, and so is what their functions read;
- functions and classes of the program's namespace by their code, defaults, closure cells,
  attributes and the globals they read; bound methods by function and object;
  ``functools.partial`` by its parts;
- objects of classes written in Python by class and attributes (``__dict__``, ``__slots__``).

Anything else (an open file, a lock, a generator, a numpy array, an object of a class
written in C), more than :data:`MAX_VALUES` values besides plain data (builtin containers
of builtin scalars, read whole with :mod:`marshal`), and code that calls ``globals``,
``eval`` or ``exec`` cannot be fingerprinted. Plain Python: no IPython here.
"""

from __future__ import annotations

import builtins
import collections
import functools
import hashlib
import inspect
import marshal
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .bytecode import IMPORTED, SCALARS, code_token, global_reads, scalar_token

#: At most this many values are walked one by one for a call (plain data read whole does
#: not count); beyond, the call goes live.
MAX_VALUES = 10_000

#: ``@ptc_retry.recorded`` wrappers and the function each wraps: a wrapper read by another
#: function stands for what it wraps.
WRAPPED: weakref.WeakKeyDictionary[Callable[..., Any], Callable[..., Any]] = (
    weakref.WeakKeyDictionary()
)

# Builtins that read names no instruction shows: code that calls them cannot be followed.
_DYNAMIC = frozenset({"globals", "eval", "exec"})
_CONTAINERS = (list, tuple, dict, set, frozenset)
# A class's entries that say where it was written or how instances store attributes.
_CLASS_LAYOUT = frozenset({"__dict__", "__weakref__", "__firstlineno__", "__static_attributes__"})
# A namedtuple's field getter (C's _tuplegetter; where it is a property, it is code to follow).
_FIELD_GETTER = type(vars(collections.namedtuple("_Fields", "field"))["field"])
_LAYOUT_TYPES = (types.MemberDescriptorType, types.GetSetDescriptorType) + (
    () if _FIELD_GETTER is property else (_FIELD_GETTER,)
)
_DEFINITIONS = (type, types.FunctionType, types.BuiltinFunctionType)
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: made by a class statement (or a C extension)

_MISSING = object()


def code_digest(function: Callable[..., Any]) -> str | None:
    """A short digest of a function's (or a bound method's) code; None for a callable that
    has no Python code of its own (a builtin, an object: :func:`reads_digest` covers it)."""
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    return code_token(code)[:16]


def reads_digest(function: Callable[..., Any]) -> str | None:
    """A short digest of the values ``function`` reads if it is called now (see the module's
    docstring); None when one of them cannot be fingerprinted. Never raises."""
    try:
        token = _Walk(function).reads(function)
    except Exception:  # _CannotTell; RecursionError on deep data; an odd object's getattr
        return None
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class _CannotTell(Exception):
    """A value that cannot be fingerprinted: the call goes live."""


class _Walk:
    """One call's walk over the values its function reads."""

    def __init__(self, function: Callable[..., Any]) -> None:
        inner = getattr(function, "__func__", function)
        #: The program's namespace: its functions are followed into, not trusted.
        self.namespace: dict[str, Any] | None = getattr(inner, "__globals__", None)
        module = self.namespace.get("__name__") if self.namespace is not None else None
        self.module = module if isinstance(module, str) else getattr(function, "__module__", None)
        self._left = MAX_VALUES
        #: The compound values being walked, by id, with their depth (for cycles).
        self._open: dict[int, int] = {}

    def reads(self, function: Callable[..., Any]) -> str:
        """The token of what a call of ``function`` reads (its arguments aside)."""
        if isinstance(function, types.MethodType) and isinstance(
            function.__func__, types.FunctionType
        ):
            return f"method({self._reads(function.__func__)},{self.value(function.__self__)})"
        if isinstance(function, types.FunctionType):
            return self._reads(function)
        return self.value(function)  # a callable object: its class and its state

    def value(self, value: Any) -> str:
        """The token of one value (raises _CannotTell)."""
        self._left -= 1
        if self._left < 0:
            raise _CannotTell("too many values")
        if type(value) in SCALARS:
            return scalar_token(value)
        key = id(value)
        if key in self._open:  # which enclosing value it refers back to
            return f"cycle{self._open[key]}"
        self._open[key] = len(self._open)
        try:
            return self._compound(value)
        finally:
            del self._open[key]

    # -- kinds of values -----------------------------------------------------------------------

    def _compound(self, value: Any) -> str:
        kind = type(value)
        if kind in _CONTAINERS:
            # Plain data at C speed: marshal takes exactly these types (no subclass, no
            # object), and version 2 writes contents only, not which objects are shared.
            try:
                data = marshal.dumps(value, 2)
            except ValueError:  # an object inside, or a cycle: walked below
                pass
            else:
                return f"data#{hashlib.sha256(data).hexdigest()}"
        if kind in (list, tuple):
            return f"{kind.__name__}[{','.join(map(self.value, value))}]"
        if kind in (set, frozenset):
            return f"{kind.__name__}{{{','.join(sorted(map(self.value, value)))}}}"
        if kind in (dict, types.MappingProxyType):  # in order: iteration sees the order
            return f"dict{{{self._items(value.items())}}}"
        if kind is types.SimpleNamespace:
            return f"namespace{{{self._items(vars(value).items())}}}"
        if kind is types.ModuleType:
            return f"module:{value.__name__}"
        if kind is types.CodeType:
            return code_token(value)
        if kind is types.FunctionType:
            return self._function(value)
        if kind is types.MethodType:
            return f"method({self.value(value.__func__)},{self.value(value.__self__)})"
        if kind is functools.partial:
            parts = (value.func, value.args, value.keywords)
            return f"partial({','.join(map(self.value, parts))})"
        if kind in (staticmethod, classmethod):
            return f"{kind.__name__}({self.value(value.__func__)})"
        if kind is property:
            return f"property({','.join(map(self.value, (value.fget, value.fset, value.fdel)))})"
        if isinstance(value, type) and self._own(value):
            return self._class(value)
        if not isinstance(value, type) and all(map(self._python_class, kind.__mro__[:-1])):
            return self._object(value)
        base = next((base for base in _CONTAINERS if isinstance(value, base)), None)
        if base is not None and all(
            self._python_class(cls) for cls in kind.__mro__ if cls not in (base, object)
        ):  # a namedtuple, a Counter: its class, its items and its attributes
            contents = self.value(base(value))
            return f"{self.value(kind)}({contents}){{{self._items(_attributes(value))}}}"
        path = _import_path(value, self.module)
        if path is not None:
            return f"def:{path}"
        if kind is types.BuiltinMethodType and not isinstance(value.__self__, types.ModuleType):
            return f"builtin-method:{value.__name__}({self.value(value.__self__)})"
        raise _CannotTell(kind.__qualname__)

    def _function(self, function: types.FunctionType) -> str:
        wrapped = WRAPPED.get(function)
        if wrapped is not None:
            return f"recorded({self.value(wrapped)})"
        own = function.__globals__ is self.namespace
        if not own:
            path = _import_path(function, self.module)
            if path is not None:
                return f"def:{path}"
        parts = [code_token(function.__code__), self.value(function.__defaults__)]
        parts.append(self.value(function.__kwdefaults__))
        # What another module's function reads from its own module is trusted (see above).
        parts.append(self._reads(function) if own else self._closure(function))
        return f"function({','.join(parts)})"

    def _reads(self, function: types.FunctionType) -> str:
        """The globals ``function``'s code reads and its closure cells."""
        names, builtins_ = function.__globals__, getattr(function, "__builtins__", None)
        parts = [self._closure(function)]
        for chain in global_reads(function.__code__):
            parts.append(f"{'.'.join(chain)}={self._read(names, builtins_, chain)}")
        return f"reads({';'.join(parts)})"

    def _read(self, names: dict[str, Any], builtins_: Any, chain: tuple[str, ...]) -> str:
        """The token of a global read ``name.attribute...``: the attributes are followed as
        long as they are modules' or classes' (``config.RATE``, ``config.Rates.EUR``: a class
        another module defines is trusted by name, the attributes read of it are not), and
        the value reached is fingerprinted, with the classes passed on the way."""
        name, *attributes = chain
        if name == IMPORTED:  # (IMPORTED, "config", "RATE"): the module as imported now
            name, *attributes = attributes
            value = sys.modules.get(name, _MISSING)
            if value is _MISSING:  # not imported yet: it will be, so the read is unknown
                raise _CannotTell(f"module {name} not imported")
        elif name in names:
            value = names[name]
        else:
            table = builtins_ if isinstance(builtins_, dict) else vars(builtins)
            if name not in table:
                return "missing"
            value = table[name]
            if name in _DYNAMIC and value is getattr(builtins, name):
                raise _CannotTell(f"calls {name}()")
        classes = []  # a class on the way is fingerprinted too, as it is when read alone
        for attribute in attributes:
            if isinstance(value, types.ModuleType):
                found = getattr(value, attribute, _MISSING)
            elif isinstance(value, type):  # read as stored: no descriptor or metaclass code runs
                classes.append(self.value(value))
                found = inspect.getattr_static(value, attribute, _MISSING)
            else:
                break
            if found is _MISSING:
                return "missing"
            value = found
        return "/".join([*classes, self.value(value)])

    def _closure(self, function: types.FunctionType) -> str:
        cells = []
        for cell in function.__closure__ or ():
            try:
                cells.append(self.value(cell.cell_contents))
            except ValueError:  # a cell not bound yet
                cells.append("empty")
        return f"closure({','.join(cells)})"

    def _class(self, cls: type) -> str:
        """A class of the program's namespace: its bases and its entries."""
        bases = ",".join(map(self.value, cls.__bases__))
        entries = (
            (name, entry)
            for name, entry in vars(cls).items()
            if name not in _CLASS_LAYOUT and not isinstance(entry, _LAYOUT_TYPES)
        )
        return f"class:{cls.__qualname__}({bases}){{{self._items(entries)}}}"

    def _object(self, value: Any) -> str:
        """An object of classes written in Python: its class and its attributes."""
        return f"object({self.value(type(value))}){{{self._items(_attributes(value))}}}"

    def _items(self, items: Iterator[tuple[Any, Any]] | Any) -> str:
        return ",".join(f"{self.value(key)}:{self.value(item)}" for key, item in items)

    # -- which classes ---------------------------------------------------------------------------

    def _own(self, cls: type) -> bool:
        """Whether ``cls`` was defined in the program's namespace (followed, not trusted)."""
        return cls.__module__ == self.module and bool(cls.__flags__ & _HEAP_TYPE)

    def _python_class(self, cls: type) -> bool:
        """Whether ``cls`` was written in Python, so that its objects keep their state in
        attributes: a class of the program's namespace, or of a module read from a .py file
        (a class of a C extension keeps state this walk cannot see)."""
        if not cls.__flags__ & _HEAP_TYPE:
            return False
        if cls.__module__ == self.module:
            return True
        module = sys.modules.get(cls.__module__)
        return str(getattr(module, "__file__", None) or "").endswith(".py")


def _import_path(value: Any, own_module: str | None) -> str | None:
    """``module:qualname`` when ``value`` is what that module defines under that name (an
    imported module's function, class or callable), else None."""
    # A class's or function's own names; an object's only where it keeps them, so that no
    # __getattr__ of the object runs.
    read = getattr if isinstance(value, _DEFINITIONS) else inspect.getattr_static
    try:
        module_name = read(value, "__module__", None)
        qualname = read(value, "__qualname__", None)
        if not isinstance(module_name, str) or not isinstance(qualname, str):
            return None
        if module_name == own_module or "<" in qualname:
            return None
        found: Any = sys.modules.get(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # no such attribute, or an object whose getattr fails
        return None
    return f"{module_name}:{qualname}" if found is value else None


def _attributes(value: Any) -> list[tuple[str, Any]]:
    """An object's attributes: its ``__dict__`` and its slots, read as ``object`` reads them
    (no ``__getattr__`` of its class runs)."""
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except AttributeError:  # only slots
        attributes = {}
    if type(attributes) is not dict:
        raise _CannotTell("an odd __dict__")
    state = list(attributes.items())
    for cls in type(value).__mro__:
        state.extend(_slot_values(cls, value))
    return state


def _slot_values(cls: type, value: Any) -> Iterator[tuple[str, Any]]:
    slots = vars(cls).get("__slots__", ())
    for name in (slots,) if isinstance(slots, str) else slots:
        if name in ("__dict__", "__weakref__"):
            continue
        stored = f"_{cls.__name__.lstrip('_')}{name}" if name.startswith("__") else name
        descriptor = vars(cls).get(stored)
        if isinstance(descriptor, types.MemberDescriptorType):
            try:
                yield name, descriptor.__get__(value, cls)
            except AttributeError:  # a slot never set
                yield name, "unset"
