"""The package's shape: four layer subpackages, imports only downward, no cycle, no private reach.

Walks the AST of every module of ``hatch_jaxexport`` (imports inside functions included, since a
lazy import is still a dependency) and checks the rules ``docs/architecture.md`` states.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "hatch_jaxexport"
PACKAGE = "hatch_jaxexport"
#: Rank of each layer; a module may import its own rank or lower. ``errors`` sits below all.
LAYERS = {"errors": 0, "formats": 1, "runtime": 2, "bake": 3, "integrations": 4}
#: The runtime's rooms in the order a call walks them: a room imports only itself and the rooms
#: after it, never one before it; the shared modules at the runtime's top come after all rooms.
RUNTIME_ROOMS = ("call", "executables", "artifacts", "disk")
#: The runtime's shared modules (beside the rooms, imported by all of them).
RUNTIME_SHARED = {"jaxcompat", "_user_frame", "jax_dtypes", "notices", "source_errors"}
#: Modules outside the layers: the public facade and ``python -m``; nothing else at the top.
OUTSIDE = {"__init__", "__main__"}
#: Folder names that Python tools treat as build output and skip: pytest's default
#: ``norecursedirs``, black's default exclude, GitHub's Python ``.gitignore`` template.
TOOL_SKIPPED_NAMES = {"build", "dist", "_build", "buck-out", "venv", "env", "eggs", "sdist",
                      "site", "node_modules", "CVS", "_darcs"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def layer_of(module: str) -> str | None:
    """The layer a module of ours belongs to; ``None`` for the facade and ``__main__``."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    if parts[1] in LAYERS:
        return parts[1]
    assert parts[1] in OUTSIDE, f"{module} is neither in a layer nor a known top-level module"
    return None


def room_rank(module: str) -> int | None:
    """A runtime module's place in the call's walk (``RUNTIME_ROOMS``; the shared modules come
    last); ``None`` outside the runtime and for the runtime's own ``__init__``."""
    parts = module.split(".")
    if parts[:2] != [PACKAGE, "runtime"] or len(parts) == 2:
        return None
    if parts[2] in RUNTIME_ROOMS:
        return RUNTIME_ROOMS.index(parts[2])
    assert parts[2] in RUNTIME_SHARED, f"{module} is in no runtime room"
    return len(RUNTIME_ROOMS)


def resolve_from(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    is_package = MODULES[module].name == "__init__.py"
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Nodes under ``if TYPE_CHECKING:``: annotations only, never imported at run time."""
    return {inner for node in ast.walk(tree) if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for stmt in node.body for inner in ast.walk(stmt)}


def imports_of(module: str, type_checking: bool = False) -> list[tuple[str, str, int]]:
    """(imported module of ours, imported name or '', line) for every import in ``module``,
    and (module, attribute) for every ``module._name`` read through an imported module;
    imports under ``if TYPE_CHECKING:`` only with ``type_checking``."""
    tree = ast.parse(MODULES[module].read_text())
    skipped = set() if type_checking else type_checking_only(tree)
    found = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, "", node.lineno) for a in node.names
                      if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            target = resolve_from(module, node)
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in MODULES:  # ``from pkg import module``
                    found.append((submodule, "", node.lineno))
                    aliases[alias.asname or alias.name] = submodule
                else:
                    found.append((target, alias.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases:
            found.append((aliases[node.value.id], node.attr, node.lineno))
    return found


def test_every_module_is_in_a_layer_or_a_known_top_level_module() -> None:
    assert len(MODULES) > 30
    for module in MODULES:
        layer_of(module)


def test_imports_point_only_downward() -> None:
    upward = []
    for module in MODULES:
        layer = layer_of(module)
        if layer is None:
            continue
        for target, _, line in imports_of(module):
            other = layer_of(target)
            if other is None:
                upward.append(f"{module}:{line} imports {target} (outside the layers)")
            elif LAYERS[other] > LAYERS[layer]:
                upward.append(f"{module}:{line} ({layer}) imports {target} ({other})")
    assert upward == []


def test_runtime_rooms_import_only_the_rooms_after_them() -> None:
    """The call walks ``call/`` -> ``executables/`` -> ``artifacts/`` -> ``disk/``: no arrow
    back (annotations under ``TYPE_CHECKING`` aside), and every runtime module is in a room or
    one of the few shared ones."""
    rooms = {m: room_rank(m) for m in MODULES if room_rank(m) is not None}
    assert set(RUNTIME_ROOMS) == {m.split(".")[2] for m in rooms if m.count(".") >= 3}
    backward = [f"{module}:{line} imports {target}" for module, rank in rooms.items()
                for target, _, line in imports_of(module)
                if room_rank(target) is not None and room_rank(target) < rank]
    assert backward == []


def test_no_private_name_is_imported_from_another_module() -> None:
    reaching = [f"{module}:{line} imports {name} from {target}"
                for module in MODULES for target, name, line in imports_of(module)
                if name.startswith("_") and not name.startswith("__") and target != module]
    assert reaching == []


def import_graph() -> dict[str, list[str]]:
    """Module -> the modules of ours it imports, lazily or for annotations only
    (``TYPE_CHECKING``) included: a reader follows those arrows too."""
    return {m: sorted({t for t, _, _ in imports_of(m, type_checking=True) if t in MODULES
                       and t != m and not MODULES[t].name == "__init__.py"}) for m in MODULES}


def cycles_in(graph: dict[str, list[str]]) -> list[str]:
    """Every cycle a depth-first walk of ``graph`` meets, as ``a -> b -> a``."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
    return cycles


def lazy_imports_without_a_reason() -> list[str]:
    """Our own modules imported in a function body of a module that does not say why: a
    comment on the line or the one before, or a top-level ``# Imported in functions:`` one."""
    found = []
    for module, path in MODULES.items():
        source = path.read_text()
        if "\n# Imported in functions:" in source:
            continue
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith(
                        PACKAGE) and "#" not in lines[inner.lineno - 1] \
                        and not lines[inner.lineno - 2].strip().startswith("#"):
                    found.append(f"{module}:{inner.lineno} imports {inner.module}")
    return found


def test_imports_in_functions_say_why() -> None:
    """Imports sit at the top unless their cost says otherwise (a baked package's import must
    stay light, a command load only what it runs), and then a comment says which."""
    assert lazy_imports_without_a_reason() == []


def test_runtime_and_format_records_do_not_compile_their_annotations() -> None:
    """A NamedTuple class in a module that postpones its annotations (``from __future__ import
    annotations``) compiles each field's annotation text when it is created: 0.15 ms against
    0.07 for nine fields. The runtime and format modules, which a package's import and its
    first call load, define theirs without postponing (``formats.manifest`` says why)."""
    postponing = [module for module, path in MODULES.items()
                  if layer_of(module) in ("formats", "runtime")
                  and "(NamedTuple):" in (text := path.read_text())
                  and "\nfrom __future__ import annotations\n" in text]
    assert postponing == []


def test_no_two_modules_have_one_name() -> None:
    """A module's name says what it holds: two files of one name (``_worker.py`` in two rooms)
    would make a traceback, a log line or ``python -m`` ambiguous to a reader."""
    names: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if path.stem != "__init__":
            names.setdefault(path.stem, []).append(module)
    assert {name: found for name, found in names.items() if len(found) > 1} == {}


def test_the_module_graph_has_no_cycle() -> None:
    assert cycles_in(import_graph()) == []


def test_the_cycle_check_sees_annotation_only_imports() -> None:
    """A ``TYPE_CHECKING`` import back up the call room (the loader typed with the decorator's
    class) is a cycle a reader sees: the check must find it."""
    graph = import_graph()
    loader, decorator = "hatch_jaxexport.runtime.call.loader", \
        "hatch_jaxexport.runtime.call.decorator"
    assert loader in graph[decorator] or any(loader in graph[m] for m in graph[decorator])
    cycles = cycles_in({**graph, loader: [*graph[loader], decorator]})
    assert any(decorator in cycle and loader in cycle for cycle in cycles)


def room_of(module: str) -> str:
    """The room a module belongs to: the deepest package of ours that holds it (a package's
    ``__init__`` is its own room); a layer's top-level modules are in the layer's room."""
    if MODULES[module].name == "__init__.py":
        return module
    return module.rsplit(".", 1)[0]


ROOMS = sorted({room_of(m) for m in MODULES if layer_of(m) is not None} - {PACKAGE})


def room_api(room: str) -> set[str]:
    """What a room's ``__init__`` names in ``__all__``: its public modules and names."""
    tree = ast.parse(MODULES[room].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def crossings(type_checking: bool = True) -> list[tuple[str, str, str, int]]:
    """(module, imported module, imported name or '', line) for every import of ours that
    enters another room (annotation-only imports included); ``errors``, below every layer, is
    no room's."""
    return [(module, target, name, line) for module in MODULES if layer_of(module) is not None
            for target, name, line in imports_of(module, type_checking=type_checking)
            if target in MODULES and room_of(target) not in (room_of(module), PACKAGE)]


def test_every_room_names_its_api() -> None:
    assert {"hatch_jaxexport.runtime.call", "hatch_jaxexport.bake.export",
            "hatch_jaxexport.formats"} <= set(ROOMS)
    assert [room for room in ROOMS if not room_api(room)] == []


def private_reaches(found: list[tuple[str, str, str, int]]) -> list[str]:
    """The crossings that import another room's ``_`` module."""
    return [f"{module}:{line} imports {target}" for module, target, _, line in found
            if target.rsplit(".", 1)[1].startswith("_") and target != room_of(target)]


def outside_api(found: list[tuple[str, str, str, int]]) -> list[str]:
    """The crossings that import a module or name the room's ``__all__`` does not name."""
    outside = []
    for module, target, name, line in found:
        room = room_of(target)
        wanted = name if target == room else target.rsplit(".", 1)[1]
        if wanted and wanted not in room_api(room):
            outside.append(f"{module}:{line} imports {wanted} from {room} (not in its __all__)")
    return outside


def test_no_room_imports_another_rooms_private_module() -> None:
    """A leading ``_`` means no other room imports it: a module another room needs is public."""
    assert private_reaches(crossings()) == []


def test_rooms_are_imported_through_their_api() -> None:
    """Another room's module is one its ``__init__`` names in ``__all__``, and a name imported
    from a room's package is one it names there."""
    assert outside_api(crossings()) == []


def test_the_room_checks_would_notice(tmp_path: Path) -> None:
    """A private module of another room, and a module its room does not name, are caught,
    annotation-only imports included."""
    module = "hatch_jaxexport.bake.verify"
    MODULES[module] = tmp_path / "verify.py"
    try:
        MODULES[module].write_text(
            "from typing import TYPE_CHECKING\n"
            "from hatch_jaxexport.runtime.call._resolved_calls import fast_path\n"
            "from hatch_jaxexport.bake.workers import _worker\n"
            "if TYPE_CHECKING:\n    from hatch_jaxexport.runtime.call import loader\n"
            "from hatch_jaxexport.bake.check import Outcome, _bundle\n")
        found = [c for c in crossings() if c[0] == module]
    finally:
        MODULES[module] = PACKAGE_DIR / "bake" / "verify.py"
    assert sorted(private_reaches(found)) == [
        f"{module}:2 imports hatch_jaxexport.runtime.call._resolved_calls",
        f"{module}:3 imports hatch_jaxexport.bake.workers._worker",
        f"{module}:6 imports hatch_jaxexport.bake.check._bundle",
    ]
    outside = outside_api(found)
    assert any("imports _resolved_calls from hatch_jaxexport.runtime.call" in o for o in outside)
    assert not any("loader" in o or "Outcome" in o for o in outside)  # both named by their room
    assert room_of("hatch_jaxexport.bake.check._bundle") == "hatch_jaxexport.bake.check"


@pytest.mark.parametrize("layer", sorted(set(LAYERS) - {"errors"}))
def test_each_layer_says_what_it_may_import(layer: str) -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE_DIR / layer / "__init__.py").read_text()))
    assert doc and "import" in doc


def test_no_function_is_longer_than_80_lines() -> None:
    long = [f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for module, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > 80]
    assert long == []


#: The longest a runtime class may grow: the call path is read class by class (issue 36 asked
#: for about 150 lines; ``EagerCall`` was 269 before its executable sources became classes).
RUNTIME_CLASS_LINES = 170


def test_no_runtime_class_is_longer_than_a_reader_can_hold() -> None:
    long = [f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for module, path in MODULES.items() if room_rank(module) is not None
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef)
            and node.end_lineno - node.lineno + 1 > RUNTIME_CLASS_LINES]
    assert long == []


def test_public_modules_say_what_they_export() -> None:
    missing = [module for module, path in MODULES.items()
               if layer_of(module) is not None and not path.stem.startswith("_")
               and "__all__" not in path.read_text()]
    assert missing == []


def test_the_checks_would_notice(tmp_path: Path) -> None:
    """The AST walk sees lazy imports, relative imports and private names."""
    sample = ("def f():\n    from hatch_jaxexport.bake.export.exporter import _private\n"
              "from .. import errors\n")
    module = "hatch_jaxexport.bake.verify"
    source = MODULES[module].read_text()
    MODULES[module] = tmp_path / "verify.py"
    try:
        MODULES[module].write_text("from hatch_jaxexport.runtime.call import loader\n"
                                   "if TYPE_CHECKING:\n    import hatch_jaxexport.integrations\n"
                                   "loader._PACKAGES.clear()\n")
        found = imports_of(module)
        annotations_too = imports_of(module, type_checking=True)
    finally:
        MODULES[module] = PACKAGE_DIR / "bake" / "verify.py"
    assert source == MODULES[module].read_text()
    assert ("hatch_jaxexport.runtime.call.loader", "_PACKAGES", 4) in found
    assert not any(target == "hatch_jaxexport.integrations" for target, _, _ in found)
    assert ("hatch_jaxexport.integrations", "", 3) in annotations_too  # what the cycle check sees
    tree = ast.parse(sample)
    kinds = {type(n).__name__ for n in ast.walk(tree)}
    assert "ImportFrom" in kinds
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 2)
    assert resolve_from("hatch_jaxexport.runtime.jaxcompat", node) == "hatch_jaxexport"
    assert room_rank("hatch_jaxexport.runtime.call.loader") == 0
    assert room_rank("hatch_jaxexport.runtime.jaxcompat") == len(RUNTIME_ROOMS)


def test_the_architecture_page_maps_every_module() -> None:
    """docs/architecture.md names every module (as a path or in backticks) and every layer's
    folder."""
    page = (PACKAGE_DIR.parent / "docs" / "architecture.md").read_text()
    unnamed = [module for module, path in MODULES.items() if path.stem != "__init__"
               and not re.search(rf"[/`]{re.escape(path.stem)}(\.py)?[`,) ]", page)]
    assert unnamed == []
    assert all(f"{layer}/" in page for layer in LAYERS if layer != "errors")
    assert all(f"runtime/{room}/" in page for room in RUNTIME_ROOMS)
    assert all(f"{room.split('.', 1)[1].replace('.', '/')}/" in page for room in ROOMS)


def test_no_folder_of_the_package_or_its_tests_has_a_name_tools_skip() -> None:
    """A layer called ``build/`` was skipped by pytest's defaults, black and ``.gitignore``."""
    root = PACKAGE_DIR.parent
    folders = [p for top in (PACKAGE_DIR, root / "tests" / "unit") for p in top.rglob("*")
               if p.is_dir() and p.name != "__pycache__"]
    assert folders
    assert [p for p in folders if p.name in TOOL_SKIPPED_NAMES] == []


def test_pytest_collects_every_unit_layer_with_its_default_norecursedirs() -> None:
    """No ``norecursedirs`` override: the layer's tests are found by pytest as configured out of
    the box (collected in a fresh pytest, so a skipped folder would show as missing)."""
    import subprocess
    import sys
    import tomllib

    root = PACKAGE_DIR.parent
    options = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "norecursedirs" not in options
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/unit"], cwd=root, capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    folders = {line.split("::")[0].split("/")[2] for line in collected.stdout.splitlines()
               if line.startswith("tests/unit/") and line.count("/") >= 3}
    assert folders == {layer for layer in LAYERS if layer != "errors"}
