"""Run a program as a coroutine in a namespace, so that it behaves like a notebook cell.

Plain Python: this module knows nothing of IPython or Jupyter. A replay runs the corrected
program with :func:`run_program` in the kernel's user namespace.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import inspect
import io
import linecache
import types
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CompiledProgram",
    "compile_program",
    "make_program",
    "register_source",
    "run_program",
    "statement_spans",
]

# A block's frame reads "in <module>" in tracebacks, as a cell's does.
_BLOCK_NAME = "<module>"

# Kinds of step.
MODULE = "module"  # module code; awaitable when it awaits
BLOCK = "block"  # an async function returning (value,) after a top-level return, else None
EXPRESSION = "expression"  # the last expression; its value is the result

_DEF_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Nodes that hold statements: statements, except handlers, match cases (Python 3.10+).
_STATEMENT_HOLDERS = (ast.stmt, ast.excepthandler) + (
    (ast.match_case,) if hasattr(ast, "match_case") else ()
)
# Expression nodes that bind names: targets of assignments, loops, ``with``, ``del``.
_BINDING_CONTEXTS = (ast.Store, ast.Del)
# Match-statement patterns (Python 3.10+) that capture into a name.
_CAPTURE_PATTERNS = tuple(
    getattr(ast, name) for name in ("MatchAs", "MatchStar") if hasattr(ast, name)
)
_MATCH_MAPPING = getattr(ast, "MatchMapping", None)


@dataclass(frozen=True)
class CompiledProgram:
    """A compiled program: its steps, run in order by :meth:`run`.

    Each step is ``(kind, code)``. Runs of statements without a top-level ``return`` are
    ``"module"`` code with top-level await allowed (IPython's own mechanism, so module
    semantics hold exactly). A statement that holds a top-level ``return`` (``if bad:
    return x``) is a ``"block"``: the body of ``async def <module>():`` headed by ``global``
    for every name it binds, built with ``types.FunctionType(code, namespace)``. A last
    expression is an ``"expression"``, compiled in ``eval`` mode for its value.

    One function for the whole program would be simpler, but CPython compiles a function
    body in time quadratic in (nested scopes x names): for a program of small functions,
    2.7 s against 0.9 s as module code at 1 MB, 23 s against 3 s at 2 MB.

    A program can run any number of times.
    """

    filename: str
    steps: tuple[tuple[str, types.CodeType], ...]

    async def run(self, namespace: dict[str, Any]) -> object:
        """Run the program with ``namespace`` as its globals and return its result."""
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        namespace.setdefault("__builtins__", builtins)
        for kind, code in self.steps:
            if kind == BLOCK:
                returned = await types.FunctionType(code, namespace)()
                if returned is not None:
                    return returned[0]
                continue
            value = eval(code, namespace)
            if code.co_flags & inspect.CO_COROUTINE:
                value = await value
            if kind == EXPRESSION:
                return value
        return None


def register_source(filename: str, source: str) -> None:
    """Put ``source`` into :mod:`linecache` under ``filename``, for tracebacks.

    Lines are split as the compiler counts them (``\\n``, ``\\r\\n`` or ``\\r``), so
    traceback line numbers point at the right text. The entry stays until replaced:
    ``linecache.checkcache`` keeps entries that have no file behind them.
    """
    lines = _source_lines(source)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    linecache.cache[filename] = (len(source), None, lines, filename)


def compile_program(
    source: str, filename: str, *, transformed: str | None = None, start: int = 0
) -> CompiledProgram:
    """Compile a program to run like a notebook cell.

    What a program may rely on, as in an IPython cell:

    - top-level ``await``, ``async for`` and ``async with`` work;
    - a top-level ``return`` ends the program with that value; otherwise the value
      of a last top-level expression is the result; otherwise ``None``;
    - every name the program binds at top level lands in the namespace (the
      program's globals); comprehension variables stay in their comprehension;
      nothing else is added (except ``__builtins__`` when missing, as ``exec`` does);
    - tracebacks and syntax errors name ``filename`` and the program's own line
      numbers (``register_source`` puts the source into ``linecache``);
    - the whole program is compiled before any of it runs;
    - ``start=k`` skips the first ``k`` top-level statements (a resume): the others
      keep their line numbers, and ``from __future__`` imports still apply.

    Inside a statement that holds a top-level ``return``, and there only (see
    ``CompiledProgram``): ``from x import *`` is refused, annotations of names
    (``x: int = 1``) are not stored in ``__annotations__``, and ``locals()`` is the
    block's own.

    ``transformed`` (default ``source``) is the text compiled, e.g. IPython's
    ``transform_cell(source)``, which keeps the line structure; ``source`` is what
    syntax errors quote. ``start`` is the index of the first top-level statement
    to run (0: all of them). Raises :class:`SyntaxError` with ``filename`` and the
    line number (the whole text must parse, skipped statements included).
    """
    __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
    compiler = _Compiler(source, filename)
    text = source if transformed is None else transformed
    try:
        tree = ast.parse(text, filename, "exec")
    except ValueError as exc:  # null bytes, on Python < 3.12
        raise SyntaxError(str(exc), (filename, 1, 1, None)) from None
    body = tree.body
    compiler.flags |= _future_flags(body, compiler)
    if start > 0:
        body = body[start:]
    last = body[-1] if body and isinstance(body[-1], ast.Expr) else None
    if last is not None:
        body = body[:-1]
    may_return = "return" in text
    steps: list[tuple[str, types.CodeType]] = []
    run: list[ast.stmt] = []
    for stmt in body:
        if may_return and _holds_top_level_return(stmt):
            if run:
                steps.append((MODULE, compiler.module(run)))
                run = []
            steps.append((BLOCK, compiler.block(stmt)))
        else:
            run.append(stmt)
    if run:
        steps.append((MODULE, compiler.module(run)))
    if last is not None:
        steps.append((EXPRESSION, compiler.expression(last)))
    return CompiledProgram(filename, tuple(steps))


def statement_spans(text: str) -> list[tuple[int, int]]:
    """``(first_line, last_line)`` of each top-level statement of ``text``, 1-based.

    A statement's first line is that of its first decorator, if any. This is the
    split a resume counts in: the one :func:`compile_program` and IPython's
    ``run_ast_nodes`` both run in order. Raises :class:`SyntaxError` when ``text``
    does not parse.
    """
    try:
        tree = ast.parse(text)
    except ValueError as exc:  # null bytes, on Python < 3.12
        raise SyntaxError(str(exc)) from None
    spans = []
    for stmt in tree.body:
        first = stmt.lineno
        for decorator in getattr(stmt, "decorator_list", ()):
            first = min(first, decorator.lineno)
        spans.append((first, stmt.end_lineno or stmt.lineno))
    return spans


def make_program(
    source: str,
    filename: str,
    namespace: dict[str, Any],
    *,
    transformed: str | None = None,
    start: int = 0,
) -> Callable[[], Coroutine[Any, Any, object]]:
    """Register ``source`` in linecache, compile it, and return it as an async function.

    Each call returns a coroutine that runs the program with ``namespace`` as its
    globals and gives its result (see ``compile_program``).
    """
    __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
    register_source(filename, source)
    try:
        program = compile_program(source, filename, transformed=transformed, start=start)
    except SyntaxError as error:
        # IPython prints every frame of a SyntaxError raised by running code, hidden
        # or not: cut the compiler's frames from the traceback.
        raise error.with_traceback(None) from None

    def run() -> Coroutine[Any, Any, object]:
        return program.run(namespace)

    return run


async def run_program(
    source: str,
    filename: str,
    namespace: dict[str, Any],
    *,
    transformed: str | None = None,
    start: int = 0,
) -> object:
    """Run a program in ``namespace`` like a notebook cell (see ``compile_program``) and
    return its result.

    The result is the value of a top-level ``return``, else of a last top-level
    expression, else ``None``. The program's exceptions propagate unchanged.
    ``start=k`` runs only from the k-th top-level statement (0-based).
    """
    __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
    program = make_program(source, filename, namespace, transformed=transformed, start=start)
    return await program()


class _Compiler:
    """Compiles the parts of one program, with its flags and its error locations."""

    def __init__(self, source: str, filename: str) -> None:
        self.filename = filename
        self.source_lines = _source_lines(source)
        self.flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT

    def module(self, body: list[ast.stmt]) -> types.CodeType:
        return self._compile(ast.Module(body=body, type_ignores=[]), "exec")

    def expression(self, stmt: ast.Expr) -> types.CodeType:
        return self._compile(ast.Expression(body=stmt.value), "eval")

    def block(self, stmt: ast.stmt) -> types.CodeType:
        """``async def <module>(): global <names>; <stmt>``, its returns made ``(value,)``."""
        holder = ast.Module(body=[stmt], type_ignores=[])
        scope = _BlockScope(self)
        scope.scan(holder)
        header: list[ast.stmt] = []
        if scope.names:
            header.append(ast.Global(names=sorted(scope.names), lineno=1, col_offset=0))
        function = _async_function(header + holder.body)
        module_code = self._compile(ast.Module(body=[function], type_ignores=[]), "exec")
        return next(
            const
            for const in module_code.co_consts
            if isinstance(const, types.CodeType) and const.co_name == _BLOCK_NAME
        )

    def error(self, message: str, node: ast.AST) -> SyntaxError:
        lineno = getattr(node, "lineno", 1)
        offset = getattr(node, "col_offset", 0) + 1
        return SyntaxError(message, (self.filename, lineno, offset, self.line(lineno)))

    def line(self, lineno: int | None) -> str | None:
        if lineno is None or not 1 <= lineno <= len(self.source_lines):
            return None
        return self.source_lines[lineno - 1]

    def _compile(self, tree: ast.Module | ast.Expression, mode: str) -> types.CodeType:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        try:
            return compile(tree, self.filename, mode, flags=self.flags, dont_inherit=True)
        except SyntaxError as exc:
            # Errors found after parsing (e.g. "'return' outside function" in a class body)
            # carry no text when compiled from an AST: quote the program's line.
            if exc.text is None and exc.filename == self.filename:
                exc.text = self.line(exc.lineno)
            raise


class _BlockScope:
    """Adapts a top-level statement holding a ``return`` to run as a function body.

    Collects the names it binds in the module scope (they are declared global),
    makes each top-level ``return x`` a ``return (x,)``, turns ``global`` statements
    into ``pass`` and annotated assignments of names into plain ones (both are
    errors for names declared global), and refuses what a function body cannot
    hold. Walks everything except the bodies of nested functions, lambdas and
    classes (their decorators, defaults and bases run in the module scope).
    """

    def __init__(self, compiler: _Compiler) -> None:
        self.names: set[str] = set()
        self._compiler = compiler

    def scan(self, tree: ast.AST) -> None:
        stack: list[ast.AST] = [tree]
        while stack:
            self._visit(stack.pop(), stack)

    def _visit(self, node: ast.AST, stack: list[ast.AST]) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, _BINDING_CONTEXTS):
                self.names.add(node.id)
            return
        if isinstance(node, ast.Lambda):
            stack.append(node.args)
            return
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            raise self._compiler.error("'yield' outside function", node)
        if isinstance(node, _DEF_NODES):
            self.names.add(node.name)
            stack.extend(node.decorator_list)
            stack.append(node.args)
            if node.returns is not None:
                stack.append(node.returns)
            return
        if isinstance(node, ast.ClassDef):
            self.names.add(node.name)
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
            stack.extend(node.keywords)
            return
        if isinstance(node, ast.comprehension):
            # The target is the comprehension's own variable; a walrus in it binds here.
            stack.append(node.iter)
            stack.extend(node.ifs)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.names.add(alias.asname or alias.name.partition(".")[0])
            return
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    raise self._compiler.error(
                        "import * is not allowed in a block with a top-level return; "
                        "import the names you need",
                        node,
                    )
                self.names.add(alias.asname or alias.name)
            return
        if isinstance(node, ast.Nonlocal):
            raise self._compiler.error("nonlocal declaration not allowed at module level", node)
        if isinstance(node, ast.ExceptHandler):
            if node.name:
                self.names.add(node.name)
        elif isinstance(node, _CAPTURE_PATTERNS):
            if node.name:
                self.names.add(node.name)
        elif _MATCH_MAPPING is not None and isinstance(node, _MATCH_MAPPING):
            if node.rest:
                self.names.add(node.rest)
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, ast.stmt):
                        item = value[index] = self._adapt(item)
                    if isinstance(item, ast.AST):
                        stack.append(item)
            elif isinstance(value, ast.AST):
                stack.append(value)

    def _adapt(self, stmt: ast.stmt) -> ast.stmt:
        """The statement to run in the block's function in place of ``stmt``."""
        if isinstance(stmt, ast.Return):
            value = stmt.value or ast.copy_location(ast.Constant(value=None), stmt)
            wrapped = ast.copy_location(ast.Tuple(elts=[value], ctx=ast.Load()), value)
            return ast.copy_location(ast.Return(value=wrapped), stmt)
        if isinstance(stmt, ast.Global):
            self.names.update(stmt.names)
            return ast.copy_location(ast.Pass(), stmt)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.value is None:
                return ast.copy_location(ast.Pass(), stmt)
            assign = ast.Assign(targets=[stmt.target], value=stmt.value, type_comment=None)
            return ast.copy_location(assign, stmt)
        return stmt


def _holds_top_level_return(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` holds a ``return`` outside nested functions and classes.

    Only statements are walked: expressions (lambdas included) cannot hold one.
    """
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            return True
        if isinstance(node, _SCOPE_NODES):
            continue
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, _STATEMENT_HOLDERS))
    return False


def _future_flags(body: list[ast.stmt], compiler: _Compiler) -> int:
    """Compiler flags of the leading ``from __future__`` imports, for every step.

    The imports stay in the first step, where they bind their names as in a module.
    A later one would be accepted at the start of a later step: refuse it here.
    """
    flags = 0
    leading = True
    for index, stmt in enumerate(body):
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            if not leading:
                raise compiler.error(
                    "from __future__ imports must occur at the beginning of the file", stmt
                )
            for alias in stmt.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
        elif not (index == 0 and _is_docstring(stmt)):
            leading = False
    return flags


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _async_function(body: list[ast.stmt]) -> ast.AsyncFunctionDef:
    """``async def <module>(): <body>``, located at line 1.

    Locations are set by hand on the new nodes: ``ast.fix_missing_locations`` recurses
    and would overflow the stack on a deeply nested expression.
    """
    arguments = ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
    )
    # Python 3.12+ requires the field; older versions do not know it.
    fields = ast.AsyncFunctionDef._fields
    extra: dict[str, Any] = {"type_params": []} if "type_params" in fields else {}
    return ast.AsyncFunctionDef(
        name=_BLOCK_NAME,
        args=arguments,
        body=body,
        decorator_list=[],
        returns=None,
        type_comment=None,
        lineno=1,
        col_offset=0,
        **extra,
    )


def _source_lines(source: str) -> list[str]:
    """``source`` split into lines as the compiler counts them, with line ends."""
    return io.StringIO(source, newline=None).readlines()
