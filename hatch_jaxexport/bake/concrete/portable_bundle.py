"""An installed package's portable variants: finding and checking their files, writing bundles.

Build layer. Reads ``portable.json`` and the files it lists from an installed package WITHOUT
importing the package (:func:`package_root`, :func:`load_index`), checks every file against its
recorded size and SHA-256 (:func:`read_file`, and :func:`verify_files` for ``jaxexport verify``),
picks the variants of one function (:func:`select_variants`) and writes a ready-to-compile bundle
for non-JAX runtimes: the files, plus a README with the IREE command lines
(:func:`write_bundle`). Needs no jax, at import or when called.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.manifest import ARTIFACT_DIR, check_file_name, sha256_hex
from hatch_jaxexport.formats.portable_index import (
    FILE_KINDS,
    PORTABLE_INDEX,
    TEXT_SUFFIX,
    parse_index,
    short_name,
)


def package_root(package: str) -> Any:
    """The package's ``_jaxexport`` folder (a ``Traversable``), found WITHOUT importing it.

    ``importlib.resources.files(package)`` imports the package, whose ``__init__`` usually
    imports jax; a module object made from its spec (not executed) reads the same resources.
    """
    if not package.isidentifier():
        raise ArtifactError(f"{package!r} is not the import name of a top-level package")
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ArtifactError(f"cannot find package {package!r}")
    module = sys.modules.get(package) or importlib.util.module_from_spec(spec)
    return importlib.resources.files(module) / ARTIFACT_DIR


def load_index(package: str) -> tuple[Any, dict[str, Any]]:
    """``(folder, portable.json)`` of an installed package; ``ArtifactError`` if it has none."""
    root = package_root(package)
    path = root / PORTABLE_INDEX
    if not path.is_file():
        raise ArtifactError(f"{package} carries no portable variants ({ARTIFACT_DIR}/"
                            f"{PORTABLE_INDEX} not found): give @exportable functions "
                            "concrete= sizes and rebuild the wheel")
    return root, parse_index(path.read_bytes(), where=f"{package}/{ARTIFACT_DIR}/"
                                                      f"{PORTABLE_INDEX}")


def read_file(root: Any, entry: Mapping[str, Any]) -> bytes:
    """The bytes of one file of a variant, checked against its recorded SHA-256."""
    name = check_file_name(entry["file"])
    data = (root / name).read_bytes()
    if len(data) != entry["size"] or sha256_hex(data) != entry["sha256"]:
        raise ArtifactError(f"{ARTIFACT_DIR}/{name} does not match {PORTABLE_INDEX} "
                            "(damaged or modified after the build)")
    return data


def verify_files(root: Any, check_blob: Callable[..., list[str]]) -> tuple[set[str], list[str]]:
    """For ``jaxexport verify``: the file names portable.json accounts for, and problems."""
    path = root / PORTABLE_INDEX
    if not path.is_file():
        return set(), []
    try:
        index = parse_index(path.read_bytes())
    except (ArtifactError, OSError) as err:
        return {PORTABLE_INDEX}, [str(err)]
    listed = {PORTABLE_INDEX}
    problems: list[str] = []
    for variant in index["variants"]:
        for kind, entry in sorted(variant["files"].items()):
            listed.add(entry["file"])
            problems += check_blob(root, entry["file"], entry["size"], entry["sha256"],
                                   f"portable {variant['function']}/{variant['variant']} "
                                   f"{kind}")
    return listed, problems


def select_variants(index: Mapping[str, Any], function: str, variant: str | None = None
                    ) -> list[dict[str, Any]]:
    """The variants of ``function`` (full name or unique short name), ``ValueError`` if none."""
    names = sorted({v["function"] for v in index["variants"]})
    matches = [n for n in names if n == function] or \
        [n for n in names if short_name(n) == function or n.split(":")[-1] == function]
    if len(matches) != 1:
        refused = [u for u in index["unsupported"] if function in (u["function"],
                                                                     short_name(u["function"]))]
        refused += [u for u in index["not_requested"]
                    if function in (u["function"], short_name(u["function"]))]
        why = f" ({refused[0]['function']}: {refused[0].get('reason') or 'no concrete= sizes'})" \
            if refused else ""
        what = "is ambiguous" if matches else "has no portable variant"
        raise ValueError(f"{function!r} {what}{why}; functions with variants: "
                         f"{', '.join(names) or 'none'}")
    chosen = [v for v in index["variants"] if v["function"] == matches[0]
              and (variant is None or v["variant"] == variant)]
    if not chosen:
        known = ", ".join(v["variant"] for v in index["variants"] if v["function"] == matches[0])
        raise ValueError(f"{matches[0]} has no variant {variant!r} (variants: {known})")
    return chosen


def iree_compile_command(interface: Mapping[str, Any], source: str, output: str,
                         backend: str = "llvm-cpu") -> list[str]:
    """The ``iree-compile`` command line for a variant."""
    flags = list(interface["iree"]["compile_flags"])
    flags.append(f"--iree-hal-target-backends={backend}")
    if backend == "llvm-cpu":
        flags.append("--iree-llvmcpu-target-cpu=host")
    return ["iree-compile", *flags, source, "-o", output]


def iree_run_command(interface: Mapping[str, Any], module: str) -> list[str]:
    """An ``iree-run-module`` smoke-test command line: every input filled with ones."""
    inputs = [f"--input={i['mlir_type']}=1" for i in interface["inputs"]]
    return ["iree-run-module", "--device=local-task", f"--module={module}",
            f"--function={interface['module']['entry']}", *inputs]


def write_bundle(root: Any, index: Mapping[str, Any], variants: Sequence[Mapping[str, Any]],
                 out: Path) -> list[Path]:
    """Copy the variants' files into ``out`` and write a README with the commands."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    sections = []
    for variant in variants:
        for kind in FILE_KINDS:
            entry = variant["files"][kind]
            path = out / entry["file"]
            path.write_bytes(read_file(root, entry))
            written.append(path)
        interface = json.loads(read_file(root, variant["files"]["interface"]))
        sections.append(_readme_section(variant, interface))
    readme = out / "README.md"
    readme.write_text(_README_HEAD.format(
        function=variants[0]["function"], package=index["package"],
        jax=index["jax_version"], generator=index["generator"]) + "\n".join(sections)
        + _README_TAIL)
    written.append(readme)
    return written


def _shell(command: Sequence[str]) -> str:
    """A command over several lines: the program, one option a line, then the operands."""
    import shlex

    quoted = [shlex.quote(part) for part in command]
    options = [p for p in quoted[1:] if p.startswith("--")]
    operands = [p for p in quoted[1:] if not p.startswith("--")]
    lines = [quoted[0], *options] + ([" ".join(operands)] if operands else [])
    return " \\\n    ".join(lines)


def _readme_section(variant: Mapping[str, Any], interface: Mapping[str, Any]) -> str:
    files = variant["files"]
    stem = files["text"]["file"][: -len(TEXT_SUFFIX)]
    vmfb = f"{stem}.vmfb"
    rows = ["| # | input | dtype | shape | `--input` type |", "|---|---|---|---|---|"]
    rows += [f"| {i['index']} | `{i['name']}` | {i['dtype']} | {i['shape']} | "
             f"`{i['mlir_type']}` |" for i in interface["inputs"]]
    outs = ["| # | output | dtype | shape |", "|---|---|---|---|"]
    outs += [f"| {o['index']} | `{o['name']}` | {o['dtype']} | {o['shape']} |"
             for o in interface["outputs"]]
    static = f", static {interface['static']}" if interface["static"] else ""
    return f"""
## Variant `{variant['variant']}`

Sizes {interface['concrete']}{static}; structure {interface['structure_index']}
(`{interface['structure']}`).

- `{files['text']['file']}`: StableHLO text
- `{files['bytecode']['file']}`: StableHLO portable artifact (VHLO bytecode, StableHLO
  {interface['module']['stablehlo_version']})
- `{files['interface']['file']}`: the interface (names, shapes, dtypes, order)

Entry point: `{interface['iree']['function']}` (module `{interface['module']['name']}`,
function `{interface['module']['entry']}`). Inputs, in call order:

{chr(10).join(rows)}

Outputs, in order:

{chr(10).join(outs)}

Compile for this machine's CPU (other backends: `--iree-hal-target-backends=vulkan-spirv`,
`cuda`, `rocm`...):

```sh
{_shell(iree_compile_command(interface, files['text']['file'], vmfb))}
```

Smoke test (every input filled with ones; real data: `--input=@x.npy`, one per input, in the
order above):

```sh
{_shell(iree_run_command(interface, vmfb))}
```

From C, with the host program in hatch-jaxexport's `examples/iree_host/` (inputs as raw
little-endian files, shapes and types as above):

```sh
iree_host {vmfb} {interface['iree']['function']} \\
    {' '.join(f"{i['mlir_type']}:input{i['index']}.bin" for i in interface['inputs'])}
```
"""


_README_HEAD = """# Portable bundle: `{function}`

Concrete-size StableHLO of `{function}` from package `{package}`, exported with jax {jax} by
{generator}. It runs without JAX: compile it with a StableHLO compiler such as IREE
(`pip install iree-base-compiler iree-base-runtime` gives `iree-compile` and `iree-run-module`)
and call the entry point with the inputs listed below. Only these shapes are supported: other
sizes need another `concrete=` size and a rebuild.
"""

_README_TAIL = """
## Notes

- The interface JSON is the contract: inputs are jax's pytree flattening of the function's
  arguments (dict keys sorted, sequences in order, static arguments baked in), and `name`,
  `path` and `shape` say which array goes where.
- Constants the function closed over (weights) are inside the module.
- The `.mlirbc` file is the version-stable form: a StableHLO consumer within the StableHLO
  compatibility window reads it; `iree-compile` takes either file.
"""


__all__ = [
    "iree_compile_command",
    "iree_run_command",
    "load_index",
    "package_root",
    "read_file",
    "select_variants",
    "verify_files",
    "write_bundle",
]
