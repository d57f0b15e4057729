"""The package wheel's METADATA after a split: its extras, beside the project's own."""

from __future__ import annotations

from hatch_jaxexport.bake.executables.companion_split import add_extras
from hatch_jaxexport.formats.manifest import CompanionRecord

METADATA = """Metadata-Version: 2.4
Name: mylib
Version: 1.2.0
Requires-Dist: jax>=0.6
Provides-Extra: tpu
Requires-Dist: jax[tpu]; extra == "tpu"
License: MIT

A long description.

Provides-Extra: in the body, not a header
"""


def companion(extra: str) -> CompanionRecord:
    return CompanionRecord(extra=extra, distribution=f"mylib-jaxexport-{extra}", version="1.2.0",
                           package=f"mylib_jaxexport_{extra.replace('-', '_')}", platform="tpu",
                           manifest_sha256="ab" * 32, executables=1, size=10)


def test_extras_join_the_projects_own_and_pin_each_companion():
    text = add_extras(METADATA, [companion("tpu-v5e"), companion("tpu-v6e")])
    head, _, body = text.partition("\n\n")
    lines = head.splitlines()
    # the project's tpu extra is declared once, and now also installs the companions
    assert lines.count("Provides-Extra: tpu") == 1
    assert 'Requires-Dist: jax[tpu]; extra == "tpu"' in lines
    for extra in ("tpu-v5e", "tpu-v6e"):
        assert f"Provides-Extra: {extra}" in lines
        pin = f"Requires-Dist: mylib-jaxexport-{extra}==1.2.0"
        assert f'{pin}; extra == "{extra}"' in lines
        assert f'{pin}; extra == "tpu"' in lines
    # after the project's own requirements and extras, before the other headers; body kept
    assert lines.index("License: MIT") == len(lines) - 1
    assert body == METADATA.partition("\n\n")[2]


def test_nothing_to_add_leaves_the_metadata_as_it_was():
    assert add_extras(METADATA, []) == METADATA
