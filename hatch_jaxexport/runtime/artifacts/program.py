"""One chosen artifact as a program jax can run: its blob read and checked, deserialized once.

The call room chooses a record (``call.choice``); the executables room builds its call
(``executables.artifact_calls``) from an ``ArtifactProgram``, which reads the blob when it is
made (a damaged install is found before anything is built on it) and deserializes it only
when something needs the ``Exported``: a warm start that runs a cached executable never does.
A blob that passes its hash but that jax cannot read raises ``UnreadableArtifact`` where it is
first needed; the loader catches it and runs the source instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.manifest import TEXT_FORMS, ArtifactRecord
from hatch_jaxexport.runtime.artifacts.package_artifacts import (
    PackageArtifacts,
    deserialize_record,
    load_concrete,
    read_record,
)


class ArtifactProgram:
    """A chosen artifact of a package: its checked blob and, once needed, its ``Exported``.

    ``eager`` deserializes now (a blob another jax wrote, a sharded or pytree-typed one: found
    unusable before the call is built); otherwise on first use. ``ArtifactError`` from the
    constructor: the blob is missing or fails its hash.
    """

    def __init__(self, package: PackageArtifacts, record: ArtifactRecord, eager: bool) -> None:
        self.package, self.record = package, record
        self._blob = read_record(package, record)
        self._exported: Any = deserialize_record(package, record, self._blob) if eager else None
        self._texts: dict[str, str] = {}  # by form; "": none this jaxlib can use
        self._lock = threading.Lock()

    @classmethod
    def read(cls, package: PackageArtifacts, record: ArtifactRecord, sharded: bool
             ) -> ArtifactProgram:
        """The program of ``record``, its hash checked now; deserialized now only where that
        finds an unusable blob early enough to matter (another jax wrote it) or where the
        call needs the ``Exported`` at once (sharded, pytree-typed), else on first use."""
        import jax  # the call path only: importing a baked package never imports jax

        lazy = not sharded and not record.pytree_types and \
            package.index.jax_version == jax.__version__
        return cls(package, record, eager=not lazy)

    def exported(self) -> Any:
        """The artifact's ``Exported`` (deserialized once); ``UnreadableArtifact`` if jax cannot
        read it."""
        if self._exported is None:
            with self._lock:
                if self._exported is None:
                    self._exported = deserialize_record(self.package, self.record,
                                                        self._blob)
        return self._exported

    def out_tree(self) -> Any:
        """The tree the artifact's call returns: from the manifest's record where it says it
        (no need to read the StableHLO), else from the ``Exported``."""
        if self._exported is None and (tree := plain_tree(self.record.out_tree)) is not None:
            return tree
        return self.exported().out_tree

    def sized_form(self, form: str = "call") -> Callable[[tuple[Any, ...]], Any | None]:
        """Given flat argument types, the ``Exported`` of the record's concrete-size form
        ``form`` (``formats.manifest.SIZED_FORMS``: of its call, its VJP...) for exactly those
        types (the build refined its shapes), where the wheel has a usable one; ``None``
        otherwise (the artifact's own call serves them)."""
        sized = {leaf_types(entry["inputs"]): entry for entry in self.record.sized
                 if entry.get("form", "call") == form}

        def sized_form(types: tuple[Any, ...]) -> Any | None:
            if (entry := sized.get(types)) is None:
                return None
            try:
                return load_concrete(self.package, entry)
            except ArtifactError:
                return None  # the symbolic artifact serves the same call
        return sized_form

    def module_text(self, form: str = "call") -> str | None:
        """The module of the record's ``form`` (``call``, ``vjp``) as MLIR text (its text
        form, ``formats.manifest.TEXT_FORMS``), read and checked once, where the running
        jaxlib is the one that printed it (text is not a portable format); ``None`` otherwise,
        or where the file is damaged (the usual lowering serves every size then)."""
        if form not in self._texts:
            self._texts[form] = self._read_text(TEXT_FORMS[form]) or ""
        return self._texts[form] or None

    def _read_text(self, text_form: str) -> str | None:
        import jaxlib  # the call path only: importing a baked package never imports jax

        entry = next((e for e in self.record.sized if e.get("form") == text_form), None)
        if entry is None or self.package.index.jaxlib_version != jaxlib.__version__:
            return None
        try:
            return self.package.read_checked(entry["file"], entry["size"],
                                             entry["sha256"]).decode("utf-8")
        except (OSError, ArtifactError, UnicodeDecodeError):
            return None


def plain_tree(text: str) -> Any | None:
    """The ``PyTreeDef`` that ``text`` (its ``str``, as the manifest records an artifact's
    trees) describes, when it is built of dicts, lists, tuples and ``None`` only; ``None`` for
    anything else (namedtuples, dataclasses, registered classes: deserialize the artifact).

    Lets a shipped or cached executable run without reading the artifact's StableHLO; here,
    not in ``pytrees`` (the registrations a deserialization needs), so that such a call
    imports none of them.
    """
    import ast

    import jax

    if not (text.startswith("PyTreeDef(") and text.endswith(")")):
        return None
    body = text[len("PyTreeDef("):-1].replace("*", "0")
    try:
        value = ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    tree = jax.tree_util.tree_structure(value)
    return tree if str(tree) == text else None


def leaf_types(leaves: Any) -> tuple[Any, ...]:
    """``((8, 4), "float32"), ...``: manifest ``[[dims...], dtype]`` leaves as a lookup key."""
    return tuple((tuple(dims), dtype) for dims, dtype in leaves)


__all__ = ["ArtifactProgram", "leaf_types", "plain_tree"]
