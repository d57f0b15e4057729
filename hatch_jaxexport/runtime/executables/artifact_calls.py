"""Building the call of a chosen artifact: the step between choosing it and running it.

The call room chooses a record (``call.choice``) and hands down a ``CallSite``: what the build
needs of the function and the call, as values. ``build_artifact_call`` makes an unsharded
artifact's ``EagerCall`` (eager calls through shipped, cached or compiled executables) whose
``jax.jit`` function ``ArtifactJit`` builds on first need: the artifact's own call, its
serialized VJP (``native_vjp``), or the transformation family's primitive (``family``,
``primitive``), each member of which gets an ``EagerCall`` of its own. A sharded artifact's
call is the family's primitive, built now. Nothing here calls back into the call room: an
artifact that turns out unusable raises ``UnreadableArtifact``, which the loader catches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.formats.dimensions import aval_parts, typed_outputs
from hatch_jaxexport.formats.manifest import ArtifactRecord, member_name
from hatch_jaxexport.formats.statics import static_values_text
from hatch_jaxexport.runtime.artifacts.package_artifacts import PackageArtifacts
from hatch_jaxexport.runtime.artifacts.program import ArtifactProgram, plain_tree
from hatch_jaxexport.runtime.executables.eager_call import EagerCall
from hatch_jaxexport.runtime.jaxcompat import needs_lapack

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.artifacts.family import Family
    from hatch_jaxexport.runtime.artifacts.native_vjp import NativeVjpCall
    from hatch_jaxexport.runtime.executables.shipped import ShippedExecutables

# Imported in functions: only where a call needs them, the shipped executables' reader (and
# its CPU target table), for a wheel that ships executables of the artifact (1.4 ms of a first
# call's imports otherwise); the tiers' policy, at the first signature no shipped executable
# serves; the native VJP, for an artifact serialized with its VJP; the transformation family,
# for an artifact that bakes one (both with the family's missing-member policy); the direct
# compile of a module (``direct_module``), at the first signature the call compiles; the
# replay of traced warnings, for a record that has any; the cache folders, when the call first
# compiles through jax (the executable cache's own view, ``_user_cache``, sets them up too).


class CallSite:
    """What building a chosen artifact's call needs of the function and the call.

    A slotted class, not a NamedTuple or a frozen dataclass: creating either costs a first call
    0.1-0.3 ms (a NamedTuple compiles each postponed annotation, a dataclass its methods).
    Keyword arguments only:

    - ``family_key``: the key of the artifact's family in ``package.records(function).by_key``,
      without the member: ``(function, structure, static values, platform, mesh, variant)``;
    - ``tiered``: the function's ``tiered=`` option (``None``: the default);
    - ``uses_family``: whether the artifact runs through the transformation family (its
      options baked derivatives or batching) rather than as one ``jax.jit`` of its call;
    - ``wanted_kinds``: the members the function's options ask the build for
      (``export_spec.baked_kinds``);
    - ``source_flat``: given the primal's input tree, the source as a flat function
      (``family.source_flat``): what runs a transformation no member serves.
    """

    __slots__ = (
        "family_key",
        "function",
        "package",
        "platform",
        "source_flat",
        "strict",
        "tiered",
        "uses_family",
        "wanted_kinds",
    )

    def __init__(self, *, function: str, package: str, platform: str,
                 family_key: tuple[str, ...], tiered: bool | None, uses_family: bool,
                 wanted_kinds: frozenset[str], strict: bool,
                 source_flat: Callable[[Any], Callable[..., tuple[Any, ...]]]) -> None:
        self.function, self.package, self.platform = function, package, platform
        self.family_key, self.tiered, self.uses_family = family_key, tiered, uses_family
        self.wanted_kinds, self.strict, self.source_flat = wanted_kinds, strict, source_flat

    @property
    def mesh(self) -> str:
        return self.family_key[4]


def build_artifact_call(site: CallSite, package: PackageArtifacts, record: ArtifactRecord
                        ) -> Callable[..., Any]:
    """The call of ``record``: an ``EagerCall`` (unsharded) or the family's primitive
    (sharded). ``ArtifactError``: the blob is damaged (``UnreadableArtifact``: jax cannot read
    it, found now for a blob another jax wrote or a sharded one). Built once per resolved key,
    right before its first call: the warnings the source's body issued while it was traced
    for this artifact are issued again here (``replayed_warnings.replay``; one the user's
    filters make an error raises, marked as the source's)."""
    program = ArtifactProgram.read(package, record, sharded=bool(site.mesh))
    jit = ArtifactJit(site, program)
    if site.mesh:  # sharded variants: always through the family, never tiered
        sharded = jit()
        _replay(site, record)
        return sharded
    lapack = needs_lapack(record.custom_calls)
    call = EagerCall(jit, job(site, record), functools.partial(_tiering, site, record.size),
                     lapack, _shipped(site, package, record, program.out_tree),
                     _eager_lowerable(program, lapack), out_tree=program.out_tree)
    jit.primal = call
    _replay(site, record)
    return call


def _replay(site: CallSite, record: ArtifactRecord) -> None:
    """Issue the warnings the source's trace would have issued (most records have none)."""
    if record.warnings:
        from hatch_jaxexport.runtime.artifacts.replayed_warnings import replay

        replay(site.package, record.warnings)


def _eager_lowerable(program: ArtifactProgram, lapack: bool, form: str = "call",
                     flat: bool = False) -> Callable[[tuple[Any, ...]], Any | None]:
    """``direct_module.eager_lowerable`` of the artifact, that module imported at the first
    signature the call compiles: a call served by a shipped executable never needs it."""
    def lowerable(types: tuple[Any, ...]) -> Any | None:
        from hatch_jaxexport.runtime.executables.direct_module import eager_lowerable

        return eager_lowerable(program, lapack, form, flat)(types)
    return lowerable


class ArtifactJit:
    """An ``EagerCall``'s ``make_jitted`` for a chosen artifact: its ``jax.jit`` function,
    built on first need (a warm start that runs cached executables never needs it).
    ``members`` are the eager calls of the transformations' members built so far (the vjp of
    a ``jax.grad``), which ``call_report`` lists with the function's."""

    def __init__(self, site: CallSite, program: ArtifactProgram) -> None:
        self.site, self.program = site, program
        #: The artifact's own eager call (a native VJP's gradients run its primal through it).
        self.primal: Callable[..., Any] | None = None
        self.members: list[EagerCall] = []
        self._programs: dict[str, ArtifactProgram] = {}  # the members', by record id

    def __call__(self) -> Callable[..., Any]:
        import jax  # the call path only: importing a baked package never imports jax

        # the loader's caches (JAX's persistent one, where the user has it or opted in) are set
        # up before anything of ours compiles through jax; a call a shipped executable serves
        # never gets here, and imports none of them
        from hatch_jaxexport.runtime.disk.cache_folders import ensure_compilation_cache

        ensure_compilation_cache()
        if self.site.uses_family:
            # the primitive registers itself with jax at import: only a family call imports it
            from hatch_jaxexport.runtime.artifacts.primitive import jitted_primal

            return jitted_primal(self._family())
        if self.program.record.vjp_order and not self.site.mesh:
            return self._native_vjp()
        return jax.jit(self.program.exported().call)  # UnreadableArtifact: the source runs

    def _native_vjp(self) -> NativeVjpCall:
        """The call of an artifact serialized with jax's VJP, whose eager gradients run the
        primal's eager call and an eager call of the VJP; what it cannot serve (``vmap``,
        forward mode, a second derivative) says so in our words, then traces the source or,
        in strict mode, raises. Typed from the manifest's record where it says the trees and
        types (``record_types``): an eager gradient served by shipped or cached executables
        never deserializes the artifact."""
        from hatch_jaxexport.runtime.artifacts.family import warn_or_raise
        from hatch_jaxexport.runtime.artifacts.native_vjp import CallTypes, NativeVjpCall

        site, record, program = self.site, self.program.record, self.program

        def vjp_call() -> EagerCall:
            import jax

            vjp_job = job(site, record, "native-vjp")
            vjp_job["label"] += " vjp"  # jax's serialized VJP of the primal artifact
            leaves = len(record.in_avals)
            shipped = _shipped(site, program.package, record, lambda: flat_tree(leaves),
                               native_vjp=1)
            lapack = needs_lapack(record.custom_calls)
            call = EagerCall(lambda: jax.jit(program.exported().vjp().call), job=vjp_job,
                             tiered=False, lapack=lapack, shipped=shipped,
                             eager_lowerable=_eager_lowerable(program, lapack, "vjp"))
            self.members.append(call)
            return call

        typed = record_types(record)
        if typed is None:  # UnreadableArtifact here: the loader runs the source
            types = CallTypes.of(program.exported())
        else:
            types = CallTypes(*typed, out_types=functools.partial(
                typed_outputs, record.in_avals, record.out_avals))
        assert self.primal is not None
        return NativeVjpCall(program.exported, types, self.primal, vjp_call,
                             source_flat=site.source_flat(types.in_tree),
                             on_missing=warn_or_raise(site.function, site.strict))

    def _family(self) -> Family:
        """The transformation family of the primal artifact: typed from the manifest's records
        where they say its trees and types and agree with each other (``_family_types``),
        from the primal's ``Exported`` otherwise; its other members are read on first use."""
        from hatch_jaxexport.runtime.artifacts.family import Family, warn_or_raise
        from hatch_jaxexport.runtime.artifacts.native_vjp import CallTypes

        site, package, record = self.site, self.program.package, self.program.record
        lapack_free = {("primal", False)} if not needs_lapack(record.custom_calls) else set()
        loaders, texts = {}, {}
        for (*rest, kind, batched), member in package.records(site.function).by_key.items():
            if tuple(rest) == site.family_key and (kind, batched) != ("primal", False):
                loaders[(kind, batched)] = functools.partial(self._member_program, member)
                texts[(kind, batched)] = (member.in_avals, member.out_avals)
                if not needs_lapack(member.custom_calls):
                    lapack_free.add((kind, batched))
        typed = self._family_types(texts)
        types = CallTypes(*typed) if typed is not None else \
            CallTypes.of(self.program.exported())  # UnreadableArtifact: the source runs
        primal_avals = {}  # the primal's types by batched, where the records are trusted
        if typed is not None:
            primal_avals[False] = (record.in_avals, record.out_avals)
            if ("primal", True) in texts:
                primal_avals[True] = texts[("primal", True)]
        return Family(
            name=site.function, programs={("primal", False): self.program},
            in_tree=types.in_tree, out_tree=types.out_tree, in_dtypes=types.in_dtypes,
            out_dtypes=types.out_dtypes, source_flat=site.source_flat(types.in_tree),
            on_missing=warn_or_raise(site.function, site.strict),
            lapack_free=frozenset(lapack_free), loaders=loaders, wanted=site.wanted_kinds,
            eager=None if site.mesh else self._member_call, sharded=bool(site.mesh),
            primal_avals=primal_avals)

    def _family_types(self, members: dict[tuple[str, bool], tuple[list[str], list[str]]]
                      ) -> tuple[Any, Any, list[Any], list[Any]] | None:
        """The primal's ``record_types`` where the other members' records agree with them
        (``family.members_agree``): then nothing needs the ``Exported`` to type the family."""
        from hatch_jaxexport.runtime.artifacts.family import inexact_indices, members_agree

        record = self.program.record
        typed = record_types(record)
        if typed is None or not members_agree(record.in_avals, record.out_avals, members,
                                              inexact_indices(typed[2]),
                                              inexact_indices(typed[3])):
            return None
        return typed

    def _member_program(self, record: ArtifactRecord) -> ArtifactProgram:
        """A member's program, read once: its ``Exported`` for the family, its concrete-size
        forms for its eager call (``ArtifactError`` where its blob is missing or damaged)."""
        if record.id not in self._programs:
            self._programs[record.id] = ArtifactProgram.read(self.program.package, record,
                                                             sharded=bool(self.site.mesh))
        return self._programs[record.id]

    def _member_call(self, member: tuple[str, bool], make_jitted: Callable[[], Any]
                     ) -> EagerCall:
        """A family member's eager call (``Family.eager``): through shipped executables and
        the executable cache, like the primal's, and compiled from its bytes where it is of
        the call's size (``direct_module``: a member without symbols, or its concrete-size
        form)."""
        site, package = self.site, self.program.package
        record = package.records(site.function).by_key[(*site.family_key, *member)]  # type: ignore[index]
        shipped = _shipped(site, package, record, lambda: flat_tree(len(record.out_avals)))
        lapack = needs_lapack(record.custom_calls)
        program = self.program if member == ("primal", False) else \
            self._member_program(record)
        call = EagerCall(make_jitted, job(site, record, "flat"), False, lapack, shipped,
                         _eager_lowerable(program, lapack, flat=True))
        self.members.append(call)
        return call


def job(site: CallSite, record: ArtifactRecord, convention: str = "") -> dict[str, str]:
    """What an ``EagerCall`` needs to find the artifact again and key its cache entries; the
    convention (``flat`` for a family member, ``native-vjp`` for jax's serialized VJP) keeps
    different calls of one artifact apart."""
    found = {"package": site.package, "file": record.file, "sha256": record.sha256,
             "platform": site.platform, "function": site.function,
             "label": served_label(record)}
    if convention:
        found["convention"] = convention
    return found


def served_label(record: ArtifactRecord) -> str:
    """What tells the report lines of one function's artifacts apart: ``(mode='max')`` for
    its static values, `` vjp`` for the member of a transformation that ran."""
    statics = f"({static_values_text(record.static)})" if record.static else ""
    member = member_name(record.kind, record.batched)
    return statics + ("" if member == "primal" else f" {member}")


def _tiering(site: CallSite, module_bytes: int) -> bool:
    """Whether the artifact's first calls use a quick tier (``tier_policy.tiering_wanted``)."""
    from hatch_jaxexport.runtime.executables.tier_policy import tiering_wanted

    return tiering_wanted(site.platform, site.tiered, module_bytes)


def _shipped(site: CallSite, package: PackageArtifacts, record: ArtifactRecord,
             out_tree: Callable[[], Any], native_vjp: int = 0) -> ShippedExecutables | None:
    """The wheel's precompiled executables of ``record`` (of its serialized VJP with
    ``native_vjp=1``; ``None`` when it ships none); ``out_tree`` gives the tree the call
    returns (read only when one is used)."""
    return shipped_executables(package, site.function, record, out_tree, native_vjp)


def shipped_executables(package: PackageArtifacts, function: str, record: Any,
                        out_tree: Callable[[], Any], native_vjp: int = 0
                        ) -> ShippedExecutables | None:
    """The precompiled executables of an artifact or a concrete-size artifact (``record``:
    its ``id``, ``sha256`` and ``platform``), in the wheel and in its installed companion
    wheels; ``None`` where there are none and no companion to name."""
    found, companions = package.companion_executables(function, record.platform)
    records = [e for e in (*package.records(function).manifest.executables, *found)
               if e.artifact == record.id and e.artifact_sha256 == record.sha256
               and e.native_vjp == native_vjp]
    if not records and not companions:
        return None
    from hatch_jaxexport.runtime.executables.shipped import ShippedExecutables

    return ShippedExecutables(records, package.read_executable, out_tree, function,
                              record.platform, companions)


def record_types(record: ArtifactRecord) -> tuple[Any, Any, list[Any], list[Any]] | None:
    """An artifact's trees and flat input and output dtypes as its manifest record writes
    them, where the trees are plain (``program.plain_tree``) and hold as many leaves as the
    record lists types, each in the grammar (``formats.dimensions.aval_parts``); ``None``
    otherwise (the ``Exported`` says them)."""
    import jax.numpy as jnp

    in_tree, out_tree = plain_tree(record.in_tree), plain_tree(record.out_tree)
    parts = [aval_parts(text) for text in (*record.in_avals, *record.out_avals)]
    if in_tree is None or out_tree is None or any(p is None for p in parts) or \
            in_tree.num_leaves != len(record.in_avals) or \
            out_tree.num_leaves != len(record.out_avals):
        return None
    try:
        dtypes = [jnp.dtype(p[0]) for p in parts]  # type: ignore[index]
    except TypeError:
        return None
    return in_tree, out_tree, dtypes[:len(record.in_avals)], dtypes[len(record.in_avals):]


def flat_tree(leaves: int) -> Any:
    """The tree of a member's flat outputs (``Family.exported_call`` returns a list)."""
    import jax

    return jax.tree_util.tree_structure([0] * leaves)


__all__ = ["ArtifactJit", "CallSite", "build_artifact_call", "flat_tree", "job", "record_types",
           "served_label", "shipped_executables"]
