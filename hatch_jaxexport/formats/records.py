"""``Record``: an immutable tuple with named fields, for the records a first call creates.

The manifest's records were ``typing.NamedTuple``s, and creating one of those classes compiles
a ``__new__`` for its fields (``collections.namedtuple`` evaluates its source): 0.1-0.25 ms a
class, paid on every process's first call (``formats.manifest``'s body ran in 0.8-1.0 ms with
its seven, 0.15 ms with ``Record``s). A ``Record`` subclass is a tuple too (equality, ordering,
hashing, unpacking and JSON as a list, as before), with the same ``_fields``,
``_field_defaults``, ``_replace`` and ``_asdict``; its class is made by reading its
annotations, nothing compiled (0.02 ms over a plain class's). Creating one binds its
arguments in Python, about 3 us for 30 fields against 1 us: a first call creates tens.

    class JaxSet(Record):
        __slots__ = ()
        manifest: str
        jax_version: str = ""
"""

import inspect
import operator
from typing import Any, ClassVar


class Record(tuple):
    """A tuple whose fields are its subclass's annotated class attributes, in order; a field
    with a value in the class body has that default. Each subclass declares ``__slots__ = ()``
    (no instance dictionary: a record cannot be changed, only ``_replace``d)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = tuple(inspect.get_annotations(cls))
        cls._field_defaults = {name: cls.__dict__[name] for name in fields
                               if name in cls.__dict__}
        if any(name in cls._field_defaults for name in fields[:len(fields) - len(
                cls._field_defaults)]):
            raise TypeError(f"{cls.__name__}: a field without a default follows one with it")
        cls._fields = fields
        for index, name in enumerate(fields):
            setattr(cls, name, property(operator.itemgetter(index), doc=f"Field {index}"))

    def __new__(cls, *args: Any, **kwargs: Any) -> "Record":
        fields = cls._fields
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__} takes {len(fields)} fields, {len(args)} given")
        values = list(args)
        for name in fields[len(args):]:
            if name in kwargs:
                values.append(kwargs.pop(name))
            elif name in cls._field_defaults:
                values.append(cls._field_defaults[name])
            else:
                raise TypeError(f"{cls.__name__} needs field {name!r}")
        if kwargs:
            raise TypeError(f"{cls.__name__} has no field {next(iter(kwargs))!r}")
        return tuple.__new__(cls, values)

    def __getnewargs__(self) -> tuple[Any, ...]:
        """The fields, as ``__new__`` takes them (``copy`` and ``pickle``)."""
        return tuple(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(
            f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True)) + ")"

    def _replace(self, **changes: Any) -> Any:
        """This record with the fields ``changes`` names set to its values."""
        values = [changes.pop(name, value)
                  for name, value in zip(self._fields, self, strict=True)]
        if changes:
            raise ValueError(f"{type(self).__name__} has no field {next(iter(changes))!r}")
        return tuple.__new__(type(self), values)

    def _asdict(self) -> dict[str, Any]:
        """The fields by name, in order."""
        return dict(zip(self._fields, self, strict=True))


__all__ = ["Record"]
