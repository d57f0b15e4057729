"""``@exportable(concrete=...)``: validating the sizes of the concrete-size variants.

Separate from ``portable`` (which writes and bundles the variants) so that decorating a
function imports only this.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.formats.dimensions import check_constraint, evaluate_dim
from hatch_jaxexport.formats.spec import Structure, iter_leaves


def check_concrete(fn_name: str, concrete: Any, structures: Sequence[Structure],
                   static_combinations: int = 1, option: str = "concrete"
                   ) -> dict[str, tuple[int, ...]] | None:
    """Validate ``@exportable(concrete=...)`` (or ``option``, which takes the same sizes);
    return symbol -> sizes, or ``SpecError``.

    Every name must be a dimension symbol of some structure, every size an int >= 1, and at
    least one structure must have all its symbols bound. Every combination must satisfy the
    constraints of the structures it binds and give no negative dimension.
    """
    if concrete is None:
        return None
    where = f"@exportable spec of {fn_name}"
    example = f"e.g. {option}={{'n': [64, 1024]}}"
    if not isinstance(concrete, Mapping):
        raise SpecError(f"{where}: {option} must map dimension symbols to lists of sizes "
                        f"({example}), got {concrete!r}")
    symbols = sorted(set().union(*(s.symbols for s in structures)))
    out: dict[str, tuple[int, ...]] = {}
    for name, sizes in concrete.items():
        if not isinstance(name, str) or name not in symbols:
            raise SpecError(f"{where}: {option} names {name!r}, which is not a dimension symbol "
                            f"of any structure (symbols: {', '.join(symbols) or 'none'})")
        if isinstance(sizes, int) and not isinstance(sizes, bool):
            items: list[Any] = [sizes]
        elif isinstance(sizes, str | bytes) or not isinstance(sizes, Iterable):
            raise SpecError(f"{where}: {option} sizes of {name!r} must be a list of ints >= 1 "
                            f"({example}), got {sizes!r}")
        else:
            items = list(sizes)
        if not items:
            raise SpecError(f"{where}: {option} lists no sizes for {name!r}")
        for size in items:
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise SpecError(f"{where}: {option} sizes of {name!r} must be ints >= 1, "
                                f"got {size!r}")
        out[name] = tuple(dict.fromkeys(items))
    bound = [i for i, s in enumerate(structures) if s.symbols <= set(out)]
    if not bound:
        missing = sorted(set().union(*(s.symbols for s in structures)) - set(out))
        given = f"the symbol(s) {', '.join(sorted(out))}" if out else "no symbol"
        raise SpecError(f"{where}: {option} gives sizes for {given}, but every structure "
                        f"also uses {', '.join(missing)}; give "
                        "sizes for every symbol of at least one structure")
    for index in bound:
        structure = structures[index]
        for env in size_combinations(structure, out):
            problem = size_problem(structure, env)
            if problem:
                raise SpecError(f"{where}, structure {index}: {option} sizes {env}: {problem}")
    return out


def size_combinations(structure: Structure, concrete: Mapping[str, Sequence[int]]
                  ) -> list[dict[str, int]]:
    names = sorted(structure.symbols)
    return [dict(zip(names, sizes, strict=True))
            for sizes in itertools.product(*(concrete[n] for n in names))]


def size_problem(structure: Structure, env: Mapping[str, int]) -> str | None:
    for constraint in structure.constraints:
        if not check_constraint(constraint, env):
            return f"they violate the constraint {constraint!r}"
    for path, leaf in iter_leaves(structure.args):
        for dim in leaf.shape:
            try:
                value = evaluate_dim(dim, env)
            except ZeroDivisionError as err:
                return f"argument {path}: {err}"
            if value < 0:
                return f"argument {path} gets the negative dimension {dim} = {value}"
    return None


__all__ = ["check_concrete", "size_combinations", "size_problem"]
