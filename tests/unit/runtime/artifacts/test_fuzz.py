"""Corruption fuzzing of an installed package's ``_jaxexport/`` folder (fixed seed, fixed budget).

Every case damages the baked artifacts of ``jxe_fuzz`` (a package written and exported once for
this module) and then calls its functions in this process. Each case must end in a correct
result (the artifact, or the source traced after a ``FallbackWarning``) or a clear
``ArtifactError``: never another exception, never a wrong result, never a read of a file
outside the package (an audit hook watches every ``open``).

The blob strategies (truncation, bit flips, random bytes) change bytes the manifest's SHA-256
covers, so jax never sees them. A separate crash-safety subset rewrites the manifest's hashes to
match damaged blobs, which does feed them to jax; it runs in fresh processes, so that a
segfault or a hang would show as a failed process instead of taking pytest down.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from hatch_jaxexport import ArtifactError, FallbackWarning
from hatch_jaxexport.runtime.call import loader

PACKAGE = "jxe_fuzz"
SOURCE = '''
"""Fuzz target: one function per loader path."""
import collections
import dataclasses

import jax.numpy as jnp

from hatch_jaxexport import exportable

Stats = collections.namedtuple("Stats", ["mean", "spread"])


@dataclasses.dataclass
class Config:  # not a pytree: a manifest naming it must not break a call
    factor: float = 1.0


@exportable({"x": ("a, b", "float32")})
def scale(x):
    return jnp.sin(x) * 2.0


@exportable({"x": ("n", "float32")}, static={"mode": ["fast", "exact"]})
def poly(x, mode="fast"):
    return x * 2 if mode == "fast" else x**3 - 1


@exportable({"x": ("n", "float32")})
def stats(x):
    return Stats(jnp.mean(x), jnp.max(x) - jnp.min(x))


@exportable({"w": ("i, o", "float32"), "x": ("n, i", "float32")}, vjp_order=1)
def dense(w, x):
    return jnp.tanh(x @ w)


@exportable({"x": ("n", "float32")}, ad_order=1)
def smooth(x):
    return jnp.exp(-x * x)


@exportable({"x": ("a, b", "float32")}, {"x": ("a, b, c", "float32")})
def total(x):
    return jnp.sum(x, axis=-1)
'''

X = np.linspace(-1.0, 1.0, 6, dtype=np.float32)
W = np.arange(12, dtype=np.float32).reshape(6, 2) / 10

# Per function (manifest name): the calls that exercise it, given a getter of the callable.
Getter = Callable[[str], Any]
CALLS: dict[str, list[Callable[[Getter], Any]]] = {
    "jxe_fuzz:scale": [lambda g: g("scale")(X.reshape(2, 3))],
    "jxe_fuzz:poly": [lambda g: g("poly")(X, mode="exact"), lambda g: g("poly")(X)],
    "jxe_fuzz:stats": [lambda g: g("stats")(X)],
    "jxe_fuzz:dense": [lambda g: g("dense")(W, X.reshape(1, 6)),
                       lambda g: jax.grad(lambda w: jnp.sum(g("dense")(w, X.reshape(1, 6))))(W)],
    # every member of the family is used by some call (grad needs only the vjp member; the
    # jvp member serves forward mode), so a damaged one is always met and must be named
    "jxe_fuzz:smooth": [lambda g: g("smooth")(X),
                        lambda g: jax.grad(lambda x: jnp.sum(g("smooth")(x)))(X),
                        lambda g: jax.jvp(g("smooth"), (X,), (X,))[1]],
    "jxe_fuzz:total": [lambda g: g("total")(X.reshape(2, 3)),
                       lambda g: g("total")(X.reshape(1, 2, 3))],
}

# The figures of this module, printed by ``test_fuzz_summary``.
COUNTS: collections.Counter[str] = collections.Counter()
OUTCOMES: collections.Counter[str] = collections.Counter()


class _OpenAudit:
    """Records every path opened while active (``sys.addaudithook`` cannot be removed)."""

    installed = False
    active = False
    paths: list[str] = []  # noqa: RUF012 - one process-wide recorder

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if cls.active and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
            cls.paths.append(os.path.abspath(os.fsdecode(args[0])))

    @classmethod
    @contextlib.contextmanager
    def watch(cls) -> Iterator[list[str]]:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.paths = []
        cls.active = True
        try:
            yield cls.paths
        finally:
            cls.active = False


class Site:
    """``jxe_fuzz`` installed in ``site/``, its pristine artifact bytes, and an outside folder
    holding identical copies (a read of one of those would pass the hash check)."""

    def __init__(self, site: Path, art: Path, outside: Path, pristine: dict[str, bytes],
                 manifest: dict[str, Any], module: Any,
                 reference: dict[tuple[str, int], Any]) -> None:
        self.site, self.art, self.outside = site, art, outside
        self.pristine, self.manifest, self.module = pristine, manifest, module
        self.reference = reference

    def __repr__(self) -> str:
        return f"<Site {self.site}>"

    @property
    def records(self) -> list[dict[str, Any]]:
        return self.manifest["artifacts"]

    def restore(self) -> None:
        if self.art.is_symlink() or self.art.is_file():
            self.art.unlink()
        self.art.mkdir(exist_ok=True)
        for path in list(self.art.iterdir()):
            if path.name in self.pristine and path.is_file() and not path.is_symlink():
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        for name, data in self.pristine.items():
            (self.art / name).write_bytes(data)

    def write_manifest(self, data: bytes) -> None:
        (self.art / "manifest.json").write_bytes(data)

    def reset_loader(self) -> None:
        loader.forget_package(PACKAGE)
        for name in ("scale", "poly", "stats", "dense", "smooth", "total"):
            fn = getattr(self.module, name)
            clear = getattr(fn, "clear_cache", None)
            clear() if clear else fn.calls.clear()

    def run(self, functions: list[str], *, strict: bool) -> list[tuple[str, str]]:
        """Call ``functions`` fresh; check results and reads; return (outcome, message) pairs."""
        self.reset_loader()
        outcomes = []
        old = os.environ.get(loader.STRICT_ENV)
        os.environ[loader.STRICT_ENV] = "1" if strict else "0"
        try:
            with _OpenAudit.watch() as opened:
                for function in functions:
                    for index, call in enumerate(CALLS[function]):
                        outcomes.append(self._one(function, index, call))
        finally:
            if old is None:
                os.environ.pop(loader.STRICT_ENV, None)
            else:
                os.environ[loader.STRICT_ENV] = old
            self.reset_loader()
        outside = str(self.outside.resolve())
        for path in opened:
            real = os.path.realpath(path)
            assert not real.startswith(outside + os.sep), f"read outside the package: {path}"
            assert real != "/etc/passwd", f"read outside the package: {path}"
            if os.sep + "_jaxexport" in path:
                assert real.startswith(str(self.art.resolve()) + os.sep), \
                    f"artifact read resolved outside the package: {path} -> {real}"
        for outcome, message in outcomes:
            OUTCOMES[outcome] += 1
            # Strict mode never traces (a damaged transformation member may still warn at load).
            assert not (strict and "tracing the source" in message), message
        return outcomes

    def _one(self, function: str, index: int, call: Callable[[Getter], Any]) -> tuple[str, str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = jax.block_until_ready(call(lambda name: getattr(self.module, name)))
            except ArtifactError as err:
                assert str(err).strip(), "empty ArtifactError"
                error = str(err)
            else:
                error = None
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        if error is not None:  # what the user sees: the error, and any warning before it
            return "artifact_error", "\n".join([error, *fallbacks])
        assert_same(got, self.reference[function, index])
        return ("fallback", "\n".join(fallbacks)) if fallbacks else ("artifact", "")


def assert_same(got: Any, expected: Any) -> None:
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected),
                    strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def _source_getter(module: Any) -> Getter:
    def get(name: str) -> Any:
        fn = getattr(module, name)
        return jax.jit(fn.__wrapped__, static_argnames=tuple(fn.export_spec.static))

    return get


def make_site(root: Path) -> Path:
    """Write ``jxe_fuzz`` under ``root/site`` and export it (as a wheel install would hold it)."""
    from hatch_jaxexport.bake import export_package

    pkg = root / "site" / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(SOURCE))
    export_package(PACKAGE, pkg / "_jaxexport", search_path=[root / "site"], jobs=2)
    return root / "site"


@pytest.fixture(scope="module")
def fuzz_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("fuzz")
    site = make_site(root)
    art = site / PACKAGE / "_jaxexport"
    outside = root / "outside"
    shutil.copytree(art, outside)
    pristine = {p.name: p.read_bytes() for p in sorted(art.iterdir())}
    sys.path.insert(0, str(site))
    try:
        import importlib

        module = importlib.import_module(PACKAGE)
        assert Path(module.__file__).parent == site / PACKAGE
        reference = {(fn, i): jax.block_until_ready(call(_source_getter(module)))
                     for fn, calls in CALLS.items() for i, call in enumerate(calls)}
        state = Site(site, art, outside, pristine, json.loads(pristine["manifest.json"]), module,
                     reference)
        clean = state.run(list(CALLS), strict=True)  # pristine: every call uses its artifact
        assert {outcome for outcome, _ in clean} == {"artifact"}, clean
        yield state
    finally:
        sys.path.remove(str(site))
        loader.forget_package(PACKAGE)
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


#: CI's run (``scripts/test.sh`` without ``--whole``) draws the first third of each test's
#: examples (derandomized: the same cases, in the same order, as the whole run's first third);
#: the whole run (``HATCH_JAXEXPORT_TEST_WHOLE=1``) draws them all.
EXAMPLES_DIVISOR = 1 if os.environ.get("HATCH_JAXEXPORT_TEST_WHOLE") == "1" else 3


def examples(whole_run: int) -> int:
    """How many examples a fuzz test draws in this run, ``whole_run`` in the whole run."""
    return max(1, whole_run // EXAMPLES_DIVISOR)


FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def _check_blob_case(site: Site, record: dict[str, Any], data: bytes, strict: bool,
                     strategy: str) -> None:
    site.restore()
    (site.art / record["file"]).write_bytes(data)
    note(f"{strategy}: {record['file']} ({record['function']}, {record['kind']}) -> "
         f"{len(data)} bytes, strict={strict}")
    outcomes = site.run([record["function"]], strict=strict)
    COUNTS[strategy] += 1
    if not strict:
        assert "artifact_error" not in {o for o, _ in outcomes}, outcomes
    if data != site.pristine[record["file"]]:
        # The damaged blob must be named: in the fallback warning, or the strict error.
        assert any(record["file"] in message for _, message in outcomes), outcomes


def _records(site: Site) -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(site.records)


@settings(FUZZ, max_examples=examples(120))
@given(data=st.data(), strict=st.booleans())
def test_truncated_blobs(fuzz_site: Site, data: st.DataObject, strict: bool,
                         maintainer_warnings) -> None:
    record = data.draw(_records(fuzz_site))
    blob = fuzz_site.pristine[record["file"]]
    cut = data.draw(st.integers(0, len(blob) - 1) | st.sampled_from([0, 1, 4, 8, len(blob) - 1]))
    _check_blob_case(fuzz_site, record, blob[:cut], strict, "blob truncation")


@settings(FUZZ, max_examples=examples(150))
@given(data=st.data(), strict=st.booleans())
def test_bit_flipped_blobs(fuzz_site: Site, data: st.DataObject, strict: bool,
                           maintainer_warnings) -> None:
    record = data.draw(_records(fuzz_site))
    blob = bytearray(fuzz_site.pristine[record["file"]])
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(blob) - 1), st.integers(0, 7)),
                               min_size=1, max_size=8))
    for offset, bit in flips:
        blob[offset] ^= 1 << bit
    _check_blob_case(fuzz_site, record, bytes(blob), strict, "blob bit flips")


@settings(FUZZ, max_examples=examples(120))
@given(data=st.data(), strict=st.booleans())
def test_random_byte_blobs(fuzz_site: Site, data: st.DataObject, strict: bool,
                           maintainer_warnings) -> None:
    record = data.draw(_records(fuzz_site))
    blob = fuzz_site.pristine[record["file"]]
    how = data.draw(st.sampled_from(["replace", "splice", "append", "prefix"]))
    noise = data.draw(st.binary(min_size=1, max_size=2048))
    if how == "replace":
        damaged = noise
    elif how == "splice":
        at = data.draw(st.integers(0, len(blob) - 1))
        damaged = blob[:at] + noise + blob[at + len(noise):]
    elif how == "append":
        damaged = blob + noise
    else:
        damaged = noise + blob
    _check_blob_case(fuzz_site, record, damaged, strict, "blob random bytes")


# --- manifest JSON mutations ---------------------------------------------------------------

_DEEP = "\u0000DEEP\u0000"  # replaced in the JSON text by deeply nested brackets
_HUGE = "\u0000HUGE\u0000"  # replaced by numbers json cannot or should not hold

weird_strings = st.one_of(
    st.text(max_size=40),
    st.sampled_from([
        "", ".", "..", "../manifest.json", "../../outside/manifest.json",
        "../../../outside/jxe_fuzz_scale.jaxexport", "/etc/passwd", "C:\\Windows\\x.jaxexport",
        "a/../../b", "~/.ssh/id_rsa", "manifest.json", "__init__.py", "..\\..\\x", "\x00",
        "x" * 10_000, "os:system", "builtins:eval", "subprocess:Popen", "jxe_fuzz:Stats",
        "jxe_fuzz..x:Y", "jxe_fuzz.\x00:Y", "jxe_fuzz:__class__", "jxe_fuzz:collections",
        "jxe_fuzz:jnp.ndarray", "jxe_fuzz:jnp.fft.X", "jxe_fuzz:Config", "jxe_fuzzx:Stats",
        "primal", "jvp", "vjp", "cpu", "cuda",
        "\ud800", "0" * 64, "f" * 64, "jxe_fuzz:scale", "jxe_fuzz:poly", "x: float32[n]",
        "x: float32[a, b]", "x: float32[a, b, c]",
    ]))
weird_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(),
        st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 1, 2**31, 2**34, 2**63, 2**64]),
        st.floats(allow_nan=True, allow_infinity=True), weird_strings,
        st.just(_DEEP), st.just(_HUGE)),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(weird_strings, children, max_size=4),
    max_leaves=8)


# Fields naming what a record is (not its bytes: copying file, sha256 and size together would
# be a consistent forgery, which no check can tell from a real build).
MIXUP_FIELDS = ["function", "structure", "structure_index", "static", "platform", "kind",
                "batched", "file", "pytree_types"]


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            found += _paths(value, (*prefix, i))
    return found


def _at(tree: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def _field_values(site: Site) -> dict[str, list[Any]]:
    """Each record field's values across records: copying one over is a plausible mix-up."""
    values: dict[str, list[Any]] = collections.defaultdict(list)
    for record in site.records + site.manifest["skipped"]:
        for key, value in record.items():
            values[key].append(value)
    return values


def _encode(tree: Any, depth: int, huge: str) -> bytes:
    text = json.dumps(tree, sort_keys=True, indent=1, allow_nan=True)
    text = text.replace(json.dumps(_DEEP), "[" * depth + "]" * depth)
    return text.replace(json.dumps(_HUGE), huge).encode("utf-8", "surrogatepass")


def _functions_touched(site: Site, path: tuple[Any, ...], tree: Any) -> list[str]:
    names = set()
    if len(path) >= 2 and path[0] in ("artifacts", "skipped") and isinstance(path[1], int):
        for source in (site.manifest, tree):
            try:
                names.add(_at(source, path[:2])["function"])
            except (IndexError, KeyError, TypeError):
                pass
    names = {n for n in names if n in CALLS}
    return sorted(names) or ["jxe_fuzz:scale"]


@settings(FUZZ, max_examples=examples(450))
@given(data=st.data(), strict=st.booleans())
def test_manifest_json_mutations(fuzz_site: Site, data: st.DataObject, strict: bool) -> None:
    site = fuzz_site
    tree = copy.deepcopy(site.manifest)
    paths = _paths(tree)
    touched: list[tuple[Any, ...]] = []
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        op = data.draw(st.sampled_from(["replace", "replace", "delete", "add", "duplicate",
                                        "copy_field", "traversal", "pytree_ref", "mixup"]))
        try:
            parent, key = (_at(tree, path[:-1]), path[-1]) if path else (None, None)
            node = _at(tree, path)
        except (IndexError, KeyError, TypeError):
            continue  # an earlier mutation removed it
        if op == "replace" and path:
            parent[key] = data.draw(weird_values)
        elif op == "delete" and path:
            del parent[key]
        elif op == "add" and isinstance(node, dict):
            node[data.draw(weird_strings)] = data.draw(weird_values)
        elif op == "duplicate" and isinstance(node, list) and node:
            node.append(copy.deepcopy(node[data.draw(st.integers(0, len(node) - 1))]))
        elif op == "copy_field" and path and isinstance(key, str):
            choices = _field_values(site).get(key) or [None]
            parent[key] = copy.deepcopy(data.draw(st.sampled_from(choices)))
        elif op == "mixup" and isinstance(tree.get("artifacts"), list) and tree["artifacts"]:
            # an identity field copied from a sibling record: two records may now claim one call
            record = data.draw(st.sampled_from(tree["artifacts"]))
            if isinstance(record, dict):
                siblings = [r for r in tree["artifacts"] if isinstance(r, dict)
                            and r is not record and r.get("function") == record.get("function")]
                other = data.draw(st.sampled_from(siblings or [record]))
                field = data.draw(st.sampled_from(MIXUP_FIELDS))
                if field in other:
                    record[field] = copy.deepcopy(other[field])
                path = ("artifacts", tree["artifacts"].index(record))
        elif op in ("traversal", "pytree_ref"):
            record = data.draw(st.sampled_from(tree.get("artifacts") or [{}])) \
                if isinstance(tree.get("artifacts"), list) else {}
            if isinstance(record, dict) and op == "traversal":
                record["file"] = data.draw(weird_strings)
            elif isinstance(record, dict):
                record["pytree_types"] = data.draw(st.lists(weird_strings, max_size=3))
            records = tree.get("artifacts")  # the record may be a stand-in outside the list
            index = next((i for i, r in enumerate(records) if r is record), None) \
                if isinstance(records, list) else None
            path = ("artifacts", index) if index is not None else ()
        touched.append(path)
        note(f"{op} at {path!r:.200}")
    depth = data.draw(st.sampled_from([1, 50, 900, 990, 5_000, 100_000]))
    huge = data.draw(st.sampled_from(["1e999999", "-1e999999", "9" * 5000, "NaN", "-Infinity",
                                      "123456789012345678901234567890", "1.5", "-0"]))
    site.restore()
    site.write_manifest(_encode(tree, depth, huge))
    functions = sorted({f for path in touched for f in _functions_touched(site, path, tree)})
    outcomes = site.run(functions, strict=strict)
    COUNTS["manifest JSON mutations"] += 1
    for outcome, message in outcomes:
        if outcome == "artifact_error":
            assert "manifest" in message or "artifact" in message or "jxe_fuzz" in message, \
                message


@settings(FUZZ, max_examples=examples(150))
@given(data=st.data(), strict=st.booleans())
def test_manifest_byte_damage(fuzz_site: Site, data: st.DataObject, strict: bool) -> None:
    site = fuzz_site
    raw = bytearray(site.pristine["manifest.json"])
    how = data.draw(st.sampled_from(["truncate", "flip", "splice", "empty"]))
    if how == "truncate":
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    elif how == "flip":
        for _ in range(data.draw(st.integers(1, 6))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "splice":
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=64))
    else:
        raw = bytearray()
    site.restore()
    site.write_manifest(bytes(raw))
    function = data.draw(st.sampled_from(sorted(CALLS)))
    note(f"manifest {how} -> {len(raw)} bytes; calling {function}")
    outcomes = site.run([function], strict=strict)
    COUNTS["manifest byte damage"] += 1
    if bytes(raw) != site.pristine["manifest.json"]:
        assert all(o in ("artifact", "fallback", "artifact_error") for o, _ in outcomes)


# --- symlinks --------------------------------------------------------------------------------

SYMLINK_TARGETS = ["outside copy", "outside other blob", "/etc/passwd", "dangling", "a folder",
                   "loop", "inside other blob", "/dev/null"]


def _symlink_cases() -> list[Any]:
    cases = []
    for entry in ("blob", "manifest", "folder"):
        for target in SYMLINK_TARGETS:
            if entry == "folder" and target not in ("outside copy", "dangling", "loop",
                                                    "/dev/null"):
                continue
            for strict in (False, True):
                cases.append(pytest.param(entry, target, strict,
                                          id=f"{entry}-{target.replace(' ', '_')}-"
                                             f"{'strict' if strict else 'default'}"))
    return cases


@pytest.mark.parametrize(("entry", "target", "strict"), _symlink_cases())
def test_symlinks_out_of_the_package(fuzz_site: Site, entry: str, target: str,
                                     strict: bool, maintainer_warnings) -> None:
    site = fuzz_site
    scale = next(r for r in site.records if r["function"] == "jxe_fuzz:scale")
    poly = next(r for r in site.records if r["function"] == "jxe_fuzz:poly")
    site.restore()
    name = {"blob": scale["file"], "manifest": "manifest.json", "folder": None}[entry]
    link = site.art / name if name else site.art
    pointee = {
        "outside copy": site.outside / name if name else site.outside,
        "outside other blob": site.outside / poly["file"],
        "/etc/passwd": Path("/etc/passwd"),
        "dangling": site.outside / "no-such-file",
        "a folder": site.outside,
        "loop": link,
        "inside other blob": site.art / poly["file"],
        "/dev/null": Path("/dev/null"),
    }[target]
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    else:
        link.unlink()
    link.symlink_to(pointee)
    outcomes = site.run(["jxe_fuzz:scale"], strict=strict)
    COUNTS["symlinks"] += 1
    site.restore()
    ((outcome, message),) = outcomes
    if entry == "blob":
        assert outcome == ("artifact_error" if strict else "fallback"), outcomes
        assert scale["file"] in message
    elif target in ("outside copy", "outside other blob", "/etc/passwd"):
        # the manifest or the whole folder elsewhere: refused unread, like a corrupt manifest
        # (the source serves the call; strict mode raises)
        assert outcome == ("artifact_error" if strict else "fallback"), outcomes
        assert "resolves outside" in message, outcomes


# --- crash safety: damaged blobs with matching hashes, in fresh processes ---------------------

CHILD = r'''
import hashlib, json, random, sys, warnings
from pathlib import Path

site, first, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, str(site))
import jax, numpy as np
import jxe_fuzz
from hatch_jaxexport import ArtifactError, FallbackWarning
from hatch_jaxexport.runtime.call import loader

art = site / "jxe_fuzz" / "_jaxexport"
pristine = {p.name: p.read_bytes() for p in art.iterdir()}
manifest = json.loads(pristine["manifest.json"])
x = np.linspace(-1.0, 1.0, 6, dtype=np.float32)
calls = {"jxe_fuzz:scale": lambda: jxe_fuzz.scale(x.reshape(2, 3)),
         "jxe_fuzz:poly": lambda: (jxe_fuzz.poly(x), jxe_fuzz.poly(x, mode="exact")),
         "jxe_fuzz:stats": lambda: jxe_fuzz.stats(x),
         "jxe_fuzz:dense": lambda: jxe_fuzz.dense(np.ones((6, 2), np.float32), x[None]),
         "jxe_fuzz:smooth": lambda: (jax.grad(lambda v: jxe_fuzz.smooth(v).sum())(x),
                                     jax.jvp(jxe_fuzz.smooth, (x,), (x,))[1]),
         "jxe_fuzz:total": lambda: (jxe_fuzz.total(x.reshape(2, 3)),
                                    jxe_fuzz.total(x.reshape(1, 2, 3)))}
for case in range(first, first + count):
    rng = random.Random(case)
    for name, data in pristine.items():
        (art / name).write_bytes(data)
    record = rng.choice(manifest["artifacts"])
    blob = bytearray(pristine[record["file"]])
    how = rng.choice(["flip", "truncate", "splice", "random"])
    if how == "flip":
        for _ in range(rng.randint(1, 4)):
            blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        blob = blob[:rng.randrange(len(blob))]
    elif how == "splice":
        at = rng.randrange(len(blob))
        blob[at:at + 16] = rng.randbytes(16)
    else:
        blob = bytearray(rng.randbytes(rng.randint(0, 4096)))
    changed = json.loads(json.dumps(manifest))
    for item in changed["artifacts"]:
        if item["file"] == record["file"]:
            item.update(sha256=hashlib.sha256(blob).hexdigest(), size=len(blob))
    (art / record["file"]).write_bytes(bytes(blob))
    (art / "manifest.json").write_text(json.dumps(changed))
    loader.forget_package("jxe_fuzz")
    for fn in (jxe_fuzz.scale, jxe_fuzz.poly, jxe_fuzz.stats, jxe_fuzz.dense, jxe_fuzz.smooth,
               jxe_fuzz.total):
        fn.clear_cache()
    print(json.dumps(["start", case]), flush=True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax.block_until_ready(calls[record["function"]]())
        fell = any(issubclass(w.category, FallbackWarning) for w in caught)
        outcome = "fallback" if fell else "ran"
    except ArtifactError:
        outcome = "artifact_error"
    except Exception as err:
        outcome = "jax error: " + type(err).__name__
    print(json.dumps(["done", case, how, outcome]), flush=True)
for name, data in pristine.items():
    (art / name).write_bytes(data)
'''

CRASH_PROCESSES, CRASH_CASES_EACH = 4, 26


def test_hash_matching_damaged_blobs_never_crash_a_fresh_process(fuzz_site: Site,
                                                                 tmp_path: Path) -> None:
    """jax itself parses these: no segfault, no hang, each case ends (in strict and default)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    procs = []
    for worker in range(CRASH_PROCESSES):
        site = tmp_path / f"site-{worker}"
        shutil.copytree(fuzz_site.site, site, ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_CACHE": "0",
               "HATCH_JAXEXPORT_STRICT": "1" if worker % 2 else "0"}
        procs.append(subprocess.Popen(
            [sys.executable, str(script), str(site), str(1000 + worker * CRASH_CASES_EACH),
             str(CRASH_CASES_EACH)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace"))
    tally: collections.Counter[str] = collections.Counter()
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"a fuzz process hung; last lines:\n{out[-2000:]}")
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("[")]
        done = [line for line in lines if line[0] == "done"]
        assert proc.returncode == 0 and len(done) == CRASH_CASES_EACH, (
            f"process ended with {proc.returncode} after {len(done)} cases "
            f"(last started: {lines[-1] if lines else None})\n{err[-3000:]}")
        for _, _, _, outcome in done:
            tally[outcome] += 1
    COUNTS["hash-matching damage, fresh processes"] += sum(tally.values())
    OUTCOMES.update({f"fresh process: {k}": v for k, v in tally.items()})
    assert sum(tally.values()) == CRASH_PROCESSES * CRASH_CASES_EACH


def test_fuzz_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints the figures; needs the whole module (skipped when run alone)."""
    expected = {"blob truncation": examples(120), "blob bit flips": examples(150),
                "blob random bytes": examples(120), "manifest JSON mutations": examples(450),
                "manifest byte damage": examples(150)}
    if any(COUNTS[name] == 0 for name in expected):
        pytest.skip("summary needs every fuzz test of this module in this process")
    for name, minimum in expected.items():
        assert COUNTS[name] >= minimum * 0.9, (name, COUNTS[name])
    total = sum(COUNTS.values())
    with capsys.disabled():
        print(f"\nfuzz: {total} cases: " + ", ".join(f"{k} {v}" for k, v in COUNTS.items()))
        print("fuzz outcomes (per call): " + ", ".join(f"{k} {v}" for k, v in
                                                       sorted(OUTCOMES.items())))
    assert total >= examples(1000)


@pytest.mark.parametrize("strict", [False, True])
def test_two_records_for_one_call_are_refused(fuzz_site: Site, strict: bool,
                                              maintainer_warnings) -> None:
    tree = copy.deepcopy(fuzz_site.manifest)
    records = [r for r in tree["artifacts"] if r["function"] == "jxe_fuzz:total"]
    records[1]["structure"] = records[0]["structure"]  # rank-3 blob listed for rank-2 calls
    fuzz_site.restore()
    fuzz_site.write_manifest(json.dumps(tree).encode())
    try:
        outcomes = fuzz_site.run(["jxe_fuzz:total"], strict=strict)
    finally:
        fuzz_site.restore()
    # the record the loader refuses never runs: the source serves every call, with the
    # source's result (``_one`` compares it), told once per reason; strict mode refuses each
    if strict:
        assert all(outcome == "artifact_error" and "listed twice" in message
                   for outcome, message in outcomes), outcomes
    else:
        assert outcomes[0][0] == "fallback" and "listed twice" in outcomes[0][1], outcomes
        assert "artifact_error" not in {outcome for outcome, _ in outcomes}, outcomes
