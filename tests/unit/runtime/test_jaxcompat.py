"""``runtime.jaxcompat`` helpers that read jax's serialized modules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from hatch_jaxexport.runtime.jaxcompat import module_needs_lapack, no_locations


def _serialized(fn, *args):
    """``fn`` exported as the build exports (``no_locations``: no traceback in locations, so
    no caller's name, such as this test's, is in the bytes)."""
    with no_locations():
        return export.export(jax.jit(fn), platforms=["cpu"])(*args).mlir_module_serialized


def test_a_module_is_said_to_need_lapack_only_where_it_calls_a_lapack_kernel():
    # a concrete-size artifact's record lists no custom-call targets: the bytes tell
    matrix, vector = np.eye(3, dtype=np.float32) * 2, np.ones(3, np.float32)
    assert module_needs_lapack(_serialized(jnp.linalg.solve, matrix, vector))
    assert not module_needs_lapack(_serialized(lambda x: jnp.sin(x) * 2, vector))


def test_a_serialized_executable_loads_with_the_types_a_fresh_one_has():
    """What the executable cache stores (``serialize_executable``'s pickle: three fields up to
    jax 0.12.0, a version and five since) loads into an executable whose outputs have the
    types of a fresh compile's, so that ``jax.grad`` accepts a cotangent seeded from them
    (jax 0.12.1's own unpickling gives each aval a new ``AutoLayout``, unequal to jax's)."""
    import io

    from jax.experimental import serialize_executable as se

    from hatch_jaxexport.runtime.jaxcompat import compiled_from_serialized, single_device_sharding

    x = jnp.float32(0.5)
    compiled = jax.jit(jnp.sin).lower(x).compile()
    payload, in_tree, out_tree = se.serialize(compiled)
    loaded = se._JaxPjrtUnpickler(io.BytesIO(payload), jax.devices()[0].client).load()
    again = compiled_from_serialized(loaded, in_tree, out_tree)
    typeof = getattr(jax, "typeof", None) or jax.core.get_aval
    assert typeof(again(x)) == typeof(compiled(x)) == typeof(jax.jit(jnp.sin)(x))
    assert float(again(x)) == float(compiled(x))

    @jax.custom_vjp
    def sine(v):
        return again(v)

    sine.defvjp(lambda v: (again(v), v), lambda v, ct: (ct * jnp.cos(v),))
    assert float(jax.grad(sine)(x)) == float(jnp.cos(x))
    # and the one-device sharding jax's executables are built with, without a warning
    assert single_device_sharding(jax.devices()[0]).device_set == {jax.devices()[0]}


def test_eager_vmap_size_reads_the_batch_a_recording_notes_and_nothing_under_a_jit():
    """The recording run notes an eager ``vmap``'s batch size (nested ones multiplied, the one
    call the loader folds them into) and no size where a ``jax.jit`` stages the call or no
    ``vmap`` is around it: no executable would serve those."""
    import jax
    import jax.numpy as jnp

    from hatch_jaxexport.runtime.jaxcompat import eager_vmap_size

    seen = []

    def probe(x, y):
        seen.append(eager_vmap_size([x, y]))
        return x + y

    x, y = jnp.ones((3, 2)), jnp.ones((5, 2))
    jax.vmap(probe)(x, x)
    jax.vmap(jax.vmap(probe, (None, 0)), (0, None))(x, y)
    jax.jit(jax.vmap(probe))(x, x)
    probe(x, x)
    assert seen == [3, 15, None, None]
