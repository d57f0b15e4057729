"""Whether an artifact's first calls use a quick tier: the policy alone, without the tiers.

``tiers`` runs the quick tier and the background compiles that replace it; deciding whether
to tier at all is asked by every artifact's first call, and the answer is mostly no (off on
every platform but ``cpu``, and for small modules). So the policy lives here, importing
nothing the tiers need: a first call that does not tier imports neither ``tiers`` nor the
background compiles (four modules, 0.9 ms each on a host whose file system calls are slow,
such as the TPU machine this project measures on).
"""

from __future__ import annotations

from typing import Any

from hatch_jaxexport.formats.settings import tiered_choice

# Imported in functions: the background compiles' slot count, only for a call that would
# tier (a tier needs them).

#: The quick tier's compile options, per platform tiering has been measured on.
QUICK_OPTIONS: dict[str, dict[str, Any]] = {"cpu": {"xla_backend_optimization_level": 0}}
#: Default tiering threshold: the serialized StableHLO size of an artifact (bytes).
TIER_MIN_MODULE_BYTES = 16_384


def tiering_wanted(platform: str, option: bool | None, module_bytes: int) -> bool:
    """Whether to tier: the environment, then the function's option, then the default.

    Never without background compiles (``HATCH_JAXEXPORT_BACKGROUND_COMPILES=0``): a quick tier
    that nothing replaces would be cached and serve every later process, slower for good.
    """
    forced = tiered_choice()
    if forced is False or platform not in QUICK_OPTIONS:
        return False
    wanted = True if forced else bool(option) if option is not None else \
        module_bytes >= TIER_MIN_MODULE_BYTES
    if not wanted:
        return False
    from hatch_jaxexport.runtime.executables._background import slot_count

    return slot_count() > 0


__all__ = ["QUICK_OPTIONS", "TIER_MIN_MODULE_BYTES", "tiering_wanted"]
