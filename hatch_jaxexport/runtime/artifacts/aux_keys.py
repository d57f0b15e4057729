"""Keys of registered pytree nodes' aux data: the same text in every process.

A structure's key (``formats.spec.Structure.key``) files its artifacts in the manifest, and it
includes the aux data of each registered node in it. The build writes the key in one process;
the user's process computes it again at import and looks the artifacts up by it. A ``repr``
with a memory address (``<Wrapper object at 0x7f...>``, mujoco-mjx's ``Data`` holds such
hashable NumPy wrappers) differs in each process although the objects are equal, so the
artifact was never found. The key is, in order:

1. plain data (``None``, numbers, strings, tuples, lists, dicts of them): its ``repr``, as
   before (a ``BCOO``'s ``{'shape': (5, 4), ...}``: manifests built earlier still match);
2. a type whose serialization was given to ``jax.export.register_pytree_node_serialization``
   (by its library or the package): the registered name and a SHA-256 of the bytes that
   ``serialize_auxdata`` gives, which is what jax itself writes into the artifact;
3. a type the build registers itself (``pytrees.register``): the JSON text it serializes to;
4. anything else: refused, saying how to make it keyable.
"""

from __future__ import annotations

import hashlib
from typing import Any

from hatch_jaxexport.formats.spec import is_plain_data, type_name
from hatch_jaxexport.runtime.jaxcompat import pytree_serialization

# Imported in functions: the pytree registrations, only for aux data that is not plain (the
# decorator imports this module only for a structure with a registered node).

#: What a refusal tells the user to do.
FIX = ("register its serialization with jax.export.register_pytree_node_serialization("
       "{cls}, serialized_name=..., serialize_auxdata=..., deserialize_auxdata=...) before "
       "this function is decorated, or make its aux data plain values (None, numbers, strings, "
       "bytes, and tuples, lists and dicts of them)")


def aux_key(cls: type, aux: Any) -> str:
    """The stable key of a ``cls`` node's aux data ``aux``; ``ValueError`` saying why there is
    none (the decorator turns it into a ``SpecError`` naming the function and argument)."""
    if is_plain_data(aux):
        return repr(aux)
    from hatch_jaxexport.runtime.artifacts import (
        pytrees,  # only nodes past plain data pay
    )

    registered = pytree_serialization(cls)
    if registered is not None and not pytrees.registered_here(cls):
        name, serialize = registered
        try:
            data = serialize(aux)
        except Exception as err:  # the user's serializer: any failure is theirs to see
            raise ValueError(f"the serialize_auxdata registered for {type_name(cls)} failed "
                             f"on its aux data: {type(err).__name__}: {err}") from None
        if not isinstance(data, bytes | bytearray):
            raise ValueError(f"the serialize_auxdata registered for {type_name(cls)} returned "
                             f"{type(data).__name__}, not bytes")
        return f"<{name} sha256:{hashlib.sha256(bytes(data)).hexdigest()[:16]}>"
    text = pytrees.json_aux_text(aux)
    if text is not None:
        return text
    raise ValueError(_refusal(cls, aux))


def _refusal(cls: type, aux: Any) -> str:
    shown = repr(aux)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return (f"its aux data {shown} ({type(aux).__name__}) is not plain data, not JSON, and "
            f"{cls.__name__} has no registered serialization, so its text could differ in each "
            f"process (a memory address); {FIX.format(cls=cls.__name__)}")


__all__ = ["FIX", "aux_key"]
