"""Registered pytree nodes keyed by a stable text of their aux data (issue 35).

A structure's key files its artifacts in the manifest; a registered node's aux data is part of
it. Aux data whose ``repr`` holds a memory address (mujoco-mjx's ``Data``) printed differently
in the build and in the user's process, and the artifact was never found. The end-to-end test
bakes ``jxe_addrnodes`` and calls it in two fresh processes, strict, with tracing counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import call_baked_fresh, export_into_copy

from hatch_jaxexport import exportable
from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.runtime.artifacts.aux_keys import aux_key


class _Boxed:
    """Equal by value, ``repr`` with an address: mjx's hashable NumPy wrappers."""

    def __init__(self, values):
        self.values = tuple(values)

    def __eq__(self, other):
        return isinstance(other, _Boxed) and self.values == other.values

    def __hash__(self):
        return hash(self.values)


class _Unkeyed:
    """Registered as a pytree node, its serialization not: aux data a ``_Boxed``."""

    def __init__(self, x, box):
        self.x, self.box = x, box


class _Keyed(_Unkeyed):
    """Registered with its serialization; aux data equal only when it is the same object."""


class _ByIdentity:
    def __init__(self, values):
        self.values = tuple(values)


for _cls in (_Unkeyed, _Keyed):
    jax.tree_util.register_pytree_node(_cls, lambda n: ((n.x,), n.box),
                                       lambda box, kids, cls=_cls: cls(kids[0], box))
jax.export.register_pytree_node_serialization(
    _Keyed, serialized_name="test_aux_keys._Keyed",
    serialize_auxdata=lambda box: json.dumps(box.values).encode(),
    deserialize_auxdata=lambda data: _ByIdentity(json.loads(data)))


def test_plain_aux_data_keeps_its_repr_so_earlier_manifests_still_match():
    from jax.experimental import sparse

    info = {"shape": (5, 4), "indices_sorted": False, "unique_indices": False}
    assert aux_key(sparse.BCOO, info) == repr(info)
    assert aux_key(_Keyed, (3, "t", None, 1.5)) == "(3, 't', None, 1.5)"


def test_registered_serialization_keys_by_a_hash_of_its_bytes_not_the_repr():
    first, second = aux_key(_Keyed, _ByIdentity([1, 2])), aux_key(_Keyed, _ByIdentity([1, 2]))
    assert first == second and first.startswith("<test_aux_keys._Keyed sha256:")
    assert "0x" not in first
    assert aux_key(_Keyed, _ByIdentity([1, 3])) != first


class _Sentinel:
    """A module-level constant's type (equinox's ``MISSING`` is one): its repr has an address."""


_UNSET = _Sentinel()


def test_an_unregistered_type_with_a_module_constant_is_keyed_by_the_json_the_build_writes():
    key = aux_key(_Unkeyed, (_UNSET, 3))
    assert key.startswith('[{"__jaxexport_ref__": "') and key.endswith(':_UNSET"}, 3]'), key
    assert "0x" not in key and key == aux_key(_Unkeyed, (_UNSET, 3))


def test_an_address_bearing_aux_without_serialization_is_refused_at_decoration():
    with pytest.raises(SpecError) as caught:
        @exportable({"node": _Unkeyed(("n", "float32"), _Boxed([1.0]))})
        def f(node):
            return node.x
    message = str(caught.value)
    assert "test_an_address_bearing_aux_without_serialization_is_refused_at_decoration" \
        ".<locals>.f, structure 0, argument 'node'" in message, message
    assert "test_aux_keys:_Unkeyed" in message and "_Boxed object at 0x" in message
    assert "register its serialization with jax.export.register_pytree_node_serialization(" \
           "_Unkeyed" in message and "make its aux data plain values" in message


def test_a_call_matches_by_key_when_aux_data_compares_by_identity():
    @exportable({"node": _Keyed(("n", "float32"), _ByIdentity([1.0, 2.0]))})
    def f(node):
        return node.x

    spec = f.export_spec.structures[0].args["node"]
    same = _Keyed(jnp.ones(2), _ByIdentity([1.0, 2.0]))  # != the baked aux, same bytes
    assert spec.mismatch(same) is None
    assert len(spec.children(same)) == 1
    other = _Keyed(jnp.ones(2), _ByIdentity([9.0]))
    assert spec.mismatch(other).startswith("a _Keyed with aux data <test_aux_keys._Keyed "
                                           "sha256:")


@pytest.fixture(scope="module")
def addrnodes_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_into_copy(tmp_path_factory.mktemp("addrnodes-site"), "jxe_addrnodes")


def test_the_manifest_keys_the_node_by_its_registered_serialization(addrnodes_site: Path):
    manifest = json.loads((addrnodes_site / "jxe_addrnodes" / "_jaxexport" / "manifest.json")
                          .read_text())
    (record,) = manifest["artifacts"]
    assert record["structure"].startswith("body: Body(qpos=float32[3], qvel=float32[3]; "
                                          "<jxe_addrnodes.Body sha256:"), record["structure"]
    assert "0x" not in record["structure"]


def test_a_node_with_an_address_in_its_aux_repr_is_served_in_fresh_processes(
        addrnodes_site: Path):
    """Two fresh processes (two addresses), strict, no body traced, equal to the source."""
    qpos, qvel = np.array([1.0, 0.5, -1.0], np.float32), np.zeros(3, np.float32)
    mass, dt = np.array([1.0, 2.0, 4.0], np.float32), np.float32(0.1)
    want_qvel = qvel - dt * qpos / mass
    want_qpos = qpos + dt * want_qvel
    runs = [call_baked_fresh(addrnodes_site, "dropin_calls.py", "addrnodes") for _ in range(2)]
    assert runs[0]["mass_repr"] != runs[1]["mass_repr"]  # what used to break the key
    for run in runs:
        assert run["traces"] == 0
        np.testing.assert_allclose(run["qpos"], want_qpos, rtol=1e-6)
        np.testing.assert_allclose(run["qvel"], want_qvel, rtol=1e-6)
        again_qvel = want_qvel - dt * want_qpos / mass
        np.testing.assert_allclose(run["again"], want_qpos + dt * again_qvel, rtol=1e-6)
        assert run["type"] == "Body" and run["same_mass"] is True
