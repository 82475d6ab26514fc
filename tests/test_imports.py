"""The package's imports flow one way: a pure core; the kernel side and the agent side
on top of it, never importing each other; the CLI, demo and eval on top of all. Every
import counts, including those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import ptc_retry

PACKAGE = Path(ptc_retry.__file__).parent
KERNEL_EXT = PACKAGE.parent / "kernel_ext"

#: Each room and the rooms it may import (besides itself).
ALLOWED = {
    "core": set(),
    "kernel": {"core"},
    "native": {"core"},
    "backend": {"core", "native", "kernelspec"},
    "kernelspec": set(),
    "top": {"core", "kernel", "native", "backend", "kernelspec"},
}


def room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "kernel_ext":
        return "kernel_ext"  # the kernel package, above all of ptc_retry
    if len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return "top"  # the package itself, cli, demo, sessions, eval


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """The modules of this project that ``path`` imports, anywhere in the file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in ("ptc_retry", "kernel_ext")}


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        # "from .x import y" names y, which may be a module or a name in x: keep modules
        edges[name] = {m for m in imports(path) if m in modules and m != name}
    return edges


def test_the_graph_sees_the_imports_it_should() -> None:
    edges = graph()
    assert "ptc_retry.core.fs" in edges["ptc_retry.backend.facade"]
    assert "ptc_retry.kernel.extension" in edges["ptc_retry"]  # inside a function


def test_no_module_imports_a_room_it_sits_beneath() -> None:
    wrong = [
        f"{a} ({room(a)}) imports {b} ({room(b)})"
        for a, targets in graph().items()
        for b in targets
        if room(b) != room(a) and room(b) not in ALLOWED[room(a)]
    ]
    assert wrong == []


def test_ptc_retry_never_imports_kernel_ext() -> None:
    for path in PACKAGE.rglob("*.py"):
        assert not any(m.startswith("kernel_ext") for m in imports(path)), path


def test_there_is_no_import_cycle() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert cycles == []


def declared_all(path: Path) -> set[str] | None:
    """The names ``path`` lists in ``__all__``, or None when it lists none."""
    for node in ast.parse(path.read_text("utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            assert isinstance(node, ast.Assign)
            return set(ast.literal_eval(node.value))
    return None


def test_no_module_imports_another_rooms_private_names() -> None:
    # A room's private names are its ``_names``, the names a module leaves out of its
    # ``__all__``, and, in a room whose package lists ``__all__`` (its public surface), every
    # name of its inner modules: another room imports from ``ptc_retry.backend`` itself.
    # The kernel package (``kernel_ext``) is held to the same rule as the rooms.
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    surfaces = {
        room(name)
        for name, path in paths.items()
        if name.count(".") == 1 and path.name == "__init__.py" and declared_all(path) is not None
    }
    importers = {**paths, **{module_name(path): path for path in KERNEL_EXT.rglob("*.py")}}
    wrong = []
    for importer, path in importers.items():
        for imported in imports(path):
            module, _, name = imported.rpartition(".")
            # "from .x import y" is listed as x and as x.y: keep the names, not the modules
            if imported in paths or module not in paths or room(module) == room(importer):
                continue
            exported = declared_all(paths[module])
            inner = room(module) in surfaces and module.count(".") > 1
            private = name.startswith("_") and not name.startswith("__")
            if private or inner or (exported is not None and name not in exported):
                wrong.append(f"{importer} imports {name} from {module}")
    assert wrong == []


def test_the_package_lists_each_audience_s_names_and_exports_their_union() -> None:
    audiences = (ptc_retry.PROGRAM_API, ptc_retry.LIBRARY_API, ptc_retry.EXTENSION_API)
    names = [name for audience in audiences for name in audience]
    assert sorted(names) == sorted(ptc_retry.__all__) and len(set(names)) == len(names)
    assert all(hasattr(ptc_retry, name) for name in names)
    assert all(f"``{name}``" in (ptc_retry.__doc__ or "") for name in names)


#: What reads the caller's stack frame.
FRAME_READS = ("_getframe", "currentframe", "f_locals", "f_back")


def test_no_module_on_the_agent_side_reads_a_stack_frame() -> None:
    # What the agent side learns of a framework comes from that framework's public API (the
    # smolagents adapter reads the agent's memory): a caller's frame is nobody's contract.
    # The kernel side reads only the frames of the program it runs (its statements).
    agent_side = ("backend", "native", "integrations", "mcp")
    wrong = [
        f"{module_name(path)} uses {name}"
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] in agent_side
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        for name in FRAME_READS
        if isinstance(node, ast.Attribute) and node.attr == name
    ]
    assert wrong == []
