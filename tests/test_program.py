"""A program run by ``run_program`` behaves like a notebook cell (plain asyncio, no kernel)."""

from __future__ import annotations

import ast
import asyncio
import builtins
import linecache
import pickle
import sys
import textwrap
import time
import traceback
from typing import Any

import pytest

from ptc_retry.core.program import compile_program, make_program, register_source, run_program

FILENAME = "<ptc-retry test>"


def fresh_namespace(**names: Any) -> dict[str, Any]:
    return {"__builtins__": builtins, "__name__": "__main__", **names}


def execute_program(source: str, namespace: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    namespace = fresh_namespace() if namespace is None else namespace
    return asyncio.run(run_program(source, FILENAME, namespace, **kwargs))


def user_names(namespace: dict[str, Any]) -> set[str]:
    return {name for name in namespace if not name.startswith("__")}


def run_as_module(source: str) -> dict[str, Any]:
    """The reference: the same program executed as a module, awaiting like IPython does."""
    namespace = fresh_namespace()
    code = compile(source, "<module>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    return namespace


# --- the result -------------------------------------------------------------------------


def test_last_expression_is_the_result() -> None:
    assert execute_program("x = 20\nx + 1") == 21


def test_no_last_expression_gives_none() -> None:
    assert execute_program("x = 1\nif x:\n    x + 1") is None


def test_empty_program_gives_none() -> None:
    assert execute_program("# nothing to do\n") is None


def test_top_level_return_ends_the_program_with_its_value() -> None:
    namespace = fresh_namespace()
    assert execute_program("a = 1\nreturn a + 1\nb = 2", namespace) == 2
    assert "b" not in namespace


def test_bare_top_level_return_gives_none() -> None:
    assert execute_program("return\n42") is None


def test_return_inside_top_level_block_ends_the_program() -> None:
    source = "for i in range(10):\n    if i == 3:\n        return i\n'not reached'"
    assert execute_program(source) == 3


def test_statements_after_a_return_that_did_not_run_still_run() -> None:
    assert execute_program("if False:\n    return 1\nx = 2\nx") == 2


def test_return_leaves_with_and_finally_normally() -> None:
    source = (
        "import contextlib\n"
        "events = []\n"
        "@contextlib.contextmanager\n"
        "def tracked():\n"
        "    try:\n"
        "        yield\n"
        "    except BaseException:\n"
        "        events.append('exception')\n"
        "        raise\n"
        "    else:\n"
        "        events.append('clean exit')\n"
        "with tracked():\n"
        "    try:\n"
        "        return 'value'\n"
        "    finally:\n"
        "        events.append('finally')\n"
    )
    namespace = fresh_namespace()
    assert execute_program(source, namespace) == "value"
    assert namespace["events"] == ["finally", "clean exit"]


def test_return_inside_a_match_case_ends_the_program() -> None:
    source = "match [1, 2]:\n    case [first, *rest]:\n        return first, rest\n'not reached'"
    assert execute_program(source) == (1, [2])


def test_return_inside_nested_function_is_untouched() -> None:
    namespace = fresh_namespace()
    source = (
        "def f():\n    return 'from f'\n"
        "class C:\n    def m(self):\n        return 'from m'\n"
        "g = lambda: 'from lambda'\n"
        "(f(), C().m(), g())"
    )
    assert execute_program(source, namespace) == ("from f", "from m", "from lambda")


# --- top-level await --------------------------------------------------------------------


def test_top_level_await() -> None:
    assert (
        execute_program("import asyncio\nawait asyncio.sleep(0)\nawait asyncio.sleep(0, result=7)")
        == 7
    )


def test_top_level_async_for_and_async_with() -> None:
    source = (
        "import contextlib\n"
        "async def numbers():\n    for n in range(3):\n        yield n\n"
        "total = 0\n"
        "async for n in numbers():\n    total += n\n"
        "async with contextlib.AsyncExitStack() as stack:\n    inside = True\n"
        "[m async for m in numbers()], total"
    )
    assert execute_program(source) == ([0, 1, 2], 3)


# --- names ------------------------------------------------------------------------------

BINDINGS: list[tuple[str, str, set[str]]] = [
    ("assignment", "a = 1", {"a"}),
    ("chained assignment", "a = b = 2", {"a", "b"}),
    ("nested unpacking", "a, (b, *c) = 1, (2, 3, 4)", {"a", "b", "c"}),
    ("list unpacking", "[a, b] = 1, 2", {"a", "b"}),
    ("augmented assignment", "a = 1\na += 1", {"a"}),
    ("annotated assignment", "a: int = 1", {"a"}),
    ("for target", "for a, b in [(1, 2)]:\n    pass", {"a", "b"}),
    (
        "async for target",
        "async def gen():\n    yield 1\nasync for a in gen():\n    pass",
        {"gen", "a"},
    ),
    (
        "with as",
        "import contextlib\nwith contextlib.nullcontext(1) as a:\n    pass",
        {"a", "contextlib"},
    ),
    (
        "async with as",
        "import contextlib\nasync with contextlib.AsyncExitStack() as a:\n    pass",
        {"a", "contextlib"},
    ),
    (
        "except as, cleared after the handler",
        "try:\n    1/0\nexcept Exception as e:\n    seen = e",
        {"seen"},
    ),
    ("import", "import os", {"os"}),
    ("dotted import binds the package", "import os.path", {"os"}),
    ("import as", "import os.path as p", {"p"}),
    ("from import", "from os import path, sep as separator", {"path", "separator"}),
    ("def", "def f():\n    pass", {"f"}),
    ("async def", "async def f():\n    pass", {"f"}),
    ("class", "class C:\n    pass", {"C"}),
    ("walrus", "if (n := 3) > 1:\n    pass", {"n"}),
    ("walrus in a comprehension binds outside it", "[(w := i) for i in range(3)]", {"w"}),
    ("walrus in a default value", "def f(a=(d := 5)):\n    pass", {"f", "d"}),
    ("walrus in a lambda stays in it", "f = lambda: (z := 1)", {"f"}),
    ("del", "a = 1\nb = 2\ndel a", {"b"}),
    ("global statement", "global g\ng = 1", {"g"}),
    ("branch not taken binds nothing", "if False:\n    a = 1\nelse:\n    b = 2", {"b"}),
    ("comprehension variable stays in it", "x = [i for i in range(3)]", {"x"}),
    ("class body names stay in the class", "class C:\n    inner = 1", {"C"}),
]
BINDINGS.append(
    (
        "match captures",
        "match [1, 2, 3, {'k': 4, 'r': 5}]:\n"
        "    case [a, *rest, {'k': v, **others}] as whole:\n"
        "        pass",
        {"a", "rest", "v", "others", "whole"},
    )
)
if sys.version_info >= (3, 12):
    BINDINGS.append(("type alias", "type Alias = int", {"Alias"}))


@pytest.mark.parametrize(
    ("source", "names"), [row[1:] for row in BINDINGS], ids=[row[0] for row in BINDINGS]
)
def test_names_bound_at_top_level_land_in_namespace(source: str, names: set[str]) -> None:
    namespace = fresh_namespace()
    execute_program(source, namespace)
    assert user_names(namespace) == names
    assert user_names(namespace) == user_names(run_as_module(source))


@pytest.mark.parametrize(
    ("source", "names"), [row[1:] for row in BINDINGS], ids=[row[0] for row in BINDINGS]
)
def test_names_bound_in_a_block_with_a_top_level_return_land_in_namespace(
    source: str, names: set[str]
) -> None:
    namespace = fresh_namespace()
    block = "if True:\n" + textwrap.indent(source, "    ") + "\n    return 'done'\n'not reached'"
    assert execute_program(block, namespace) == "done"
    assert user_names(namespace) == names


def test_values_land_in_namespace() -> None:
    namespace = fresh_namespace()
    execute_program("a, (b, *c) = 1, (2, 3, 4)\nimport os.path as p", namespace)
    assert (namespace["a"], namespace["b"], namespace["c"]) == (1, 2, [3, 4])
    assert namespace["p"] is sys.modules["os.path"]


def test_del_removes_a_name_from_namespace() -> None:
    namespace = fresh_namespace(old=1)
    execute_program("del old", namespace)
    assert "old" not in namespace


def test_names_used_but_not_bound_are_read_from_namespace() -> None:
    namespace = fresh_namespace(base=40)
    assert execute_program("def f():\n    return base + 1\nf() + len('x')", namespace) == 42


def test_comprehension_variable_does_not_clobber_a_top_level_name() -> None:
    namespace = fresh_namespace()
    execute_program("x = 'kept'\nsquares = [x * x for x in range(3)]", namespace)
    assert namespace["x"] == "kept"
    assert namespace["squares"] == [0, 1, 4]


def test_walrus_in_comprehension_binds_the_last_value() -> None:
    namespace = fresh_namespace()
    execute_program("[(last := i) for i in range(3)]", namespace)
    assert namespace["last"] == 2
    assert "i" not in namespace


def test_functions_see_later_changes_to_top_level_names() -> None:
    # Names are globals, not closure cells: like a cell, a function reads the current value.
    assert execute_program("n = 1\ndef f():\n    return n\nn = 2\nf()") == 2


def test_global_statement_at_top_level_binds_in_namespace() -> None:
    namespace = fresh_namespace(counter=1)
    execute_program("global counter\ncounter += 1", namespace)
    assert namespace["counter"] == 2
    source = "if counter:\n    global counter\n    counter += 1\n    return counter"
    assert execute_program(source, namespace) == 3
    assert namespace["counter"] == 3


def test_nothing_but_the_program_names_land_in_namespace() -> None:
    namespace = fresh_namespace()
    execute_program("a = 1\ndef f():\n    pass", namespace)
    assert set(namespace) == {"__builtins__", "__name__", "a", "f"}


def test_builtins_are_added_when_the_namespace_lacks_them() -> None:
    namespace: dict[str, Any] = {}
    assert execute_program("len('abc')", namespace) == 3


def test_functions_and_classes_get_plain_qualnames_and_pickle() -> None:
    namespace = fresh_namespace(__name__="ptc_retry_test_module")
    module = type(sys)("ptc_retry_test_module")
    sys.modules[module.__name__] = module
    try:
        execute_program(
            "class Point:\n    def norm(self):\n        return 0\ndef f():\n    pass", namespace
        )
        module.__dict__.update(namespace)
        point_class, function = namespace["Point"], namespace["f"]
        assert point_class.__qualname__ == "Point"
        assert point_class.norm.__qualname__ == "Point.norm"
        assert function.__qualname__ == "f"
        assert function.__module__ == "ptc_retry_test_module"
        assert pickle.loads(pickle.dumps(function)) is function
    finally:
        del sys.modules[module.__name__]


def test_locals_at_top_level_is_the_namespace() -> None:
    assert execute_program("locals() is globals()") is True


def test_misplaced_future_import_is_a_syntax_error() -> None:
    with pytest.raises(SyntaxError, match="beginning of the file") as info:
        compile_program("if True:\n    return\nfrom __future__ import annotations\n", FILENAME)
    assert info.value.lineno == 3


def test_future_import_at_the_top_applies() -> None:
    source = (
        "from __future__ import annotations\ndef f(a: Undefined) -> None:\n    pass\n"
        "f.__annotations__"
    )
    assert execute_program(source) == {"a": "Undefined", "return": "None"}


# --- errors and tracebacks --------------------------------------------------------------


def test_exception_traceback_points_at_the_program_line() -> None:
    source = "a = 1\nb = {}\nb['missing']\nc = 3\n"
    with pytest.raises(KeyError) as info:
        execute_program(source)
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno, frame.name) == (FILENAME, 3, "<module>")
    assert frame.line == "b['missing']"
    assert linecache.getline(FILENAME, 3) == "b['missing']\n"


def test_exception_inside_a_program_function_points_at_its_line() -> None:
    source = "def f():\n    return 1 / 0\n\nf()\n"
    with pytest.raises(ZeroDivisionError) as info:
        execute_program(source)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [(f.lineno, f.name) for f in frames if f.filename == FILENAME] == [
        (4, "<module>"),
        (2, "f"),
    ]


def test_syntax_error_has_filename_and_lineno() -> None:
    with pytest.raises(SyntaxError) as info:
        execute_program("a = 1\nb = (2,\nc = 3 +\n")
    assert info.value.filename == FILENAME
    assert info.value.lineno in (2, 3)


def test_syntax_error_found_after_parsing_quotes_the_line() -> None:
    with pytest.raises(SyntaxError) as info:
        compile_program("a = 1\nclass C:\n    return a\n", FILENAME)
    assert (info.value.filename, info.value.lineno) == (FILENAME, 3)
    assert "'return' outside function" in info.value.msg
    assert info.value.text == "    return a\n"


def test_import_star_works_at_top_level() -> None:
    namespace = fresh_namespace()
    execute_program("from os.path import *\njoin('a', 'b')", namespace)
    assert "join" in namespace and "splitext" in namespace


def test_import_star_in_a_block_with_a_top_level_return_is_refused() -> None:
    with pytest.raises(SyntaxError) as info:
        compile_program("x = 1\nif x:\n    from os.path import *\n    return x\n", FILENAME)
    assert info.value.msg == (
        "import * is not allowed in a block with a top-level return; import the names you need"
    )
    assert (info.value.filename, info.value.lineno) == (FILENAME, 3)
    assert info.value.text == "    from os.path import *\n"


@pytest.mark.parametrize(
    "source",
    ["x = 1\nyield x\n", "x = 1\nyield x\nreturn x\n", "if True:\n    yield 1\n    return\n"],
)
def test_top_level_yield_is_a_syntax_error(source: str) -> None:
    with pytest.raises(SyntaxError, match="'yield' outside function") as info:
        compile_program(source, FILENAME)
    assert info.value.lineno == 2


def test_yield_inside_a_function_is_fine() -> None:
    assert execute_program("def gen():\n    yield 1\n    yield 2\nlist(gen())") == [1, 2]


@pytest.mark.parametrize(
    "source", ["x = 1\nnonlocal x\n", "if True:\n    nonlocal x\n    return\n"]
)
def test_top_level_nonlocal_stays_a_syntax_error(source: str) -> None:
    with pytest.raises(SyntaxError, match="nonlocal") as info:
        compile_program(source, FILENAME)
    assert info.value.lineno == 2


def test_nothing_runs_when_a_later_statement_fails_to_compile() -> None:
    namespace = fresh_namespace()
    with pytest.raises(SyntaxError):
        execute_program("ran = True\nclass C:\n    return 1\n", namespace)
    assert "ran" not in namespace


def test_await_in_a_plain_nested_function_stays_a_syntax_error() -> None:
    with pytest.raises(SyntaxError, match="await") as info:
        compile_program("def f():\n    await g()\n", FILENAME)
    assert info.value.lineno == 2


# --- source, transformed text, linecache ------------------------------------------------


def test_unicode_source() -> None:
    namespace = fresh_namespace()
    source = "naïve = 'café ☕'\nλ = len(naïve)  # 注释\nλ"
    assert execute_program(source, namespace) == 6
    assert namespace["naïve"] == "café ☕"


def test_unicode_line_separator_in_a_string_keeps_line_numbers() -> None:
    source = "s = 'a\u2028b'\nraise ValueError(s)\n"
    with pytest.raises(ValueError) as info:
        execute_program(source)
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert frame.lineno == 2
    assert frame.line == "raise ValueError(s)"


def test_transformed_text_runs_and_source_is_what_tracebacks_show() -> None:
    source = "%time x = 1\nraise RuntimeError('boom')\n"
    transformed = "x = 1\nraise RuntimeError('boom')\n"
    namespace = fresh_namespace()
    with pytest.raises(RuntimeError):
        execute_program(source, namespace, transformed=transformed)
    assert namespace["x"] == 1
    assert linecache.getline(FILENAME, 1) == "%time x = 1\n"


def test_register_source_counts_lines_like_the_compiler() -> None:
    register_source("<lines>", "a\r\nb\rc\nd")
    assert linecache.getlines("<lines>") == ["a\n", "b\n", "c\n", "d\n"]


def test_make_program_can_run_twice() -> None:
    namespace = fresh_namespace(n=0)
    program = make_program("n += 1\nn", FILENAME, namespace)
    assert asyncio.run(program()) == 1
    assert asyncio.run(program()) == 2


def test_one_megabyte_program_compiles() -> None:
    parts: list[str] = []
    while sum(map(len, parts)) < 1_000_000:
        i = len(parts)
        parts.append(
            f"def step_{i}(data, limit={i}):\n"
            f"    kept = [x for x in data if x < limit]\n"
            f"    return {{'step': {i}, 'kept': len(kept)}}\n"
            f"result_{i} = step_{i}(range({i % 50}))\n"
        )
    source = "".join(parts) + "if not result_0:\n    return 'empty'\nresult_1\n"
    started = time.perf_counter()
    program = compile_program(source, FILENAME)
    assert time.perf_counter() - started < 20  # about 1.5 s on a laptop; CI can be slow
    assert [kind for kind, _ in program.steps] == ["module", "block", "expression"]
