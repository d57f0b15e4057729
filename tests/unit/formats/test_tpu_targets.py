"""TPU targets a build compiles without a TPU: names, keys and the hosts libtpu describes."""

from __future__ import annotations

import pytest

from hatch_jaxexport.formats.tpu_targets import (
    GENERATIONS,
    describe_tpu_targets,
    is_tpu_key,
    parse_tpu_target,
)


@pytest.mark.parametrize("name, key, topology, bounds, devices, chip, kind", [
    ("v5e", "tpu:v5e:1x1", "v5e:1x1", (1, 1, 1), 1, "default", "TPU v5 lite"),
    ("v5e:4", "tpu:v5e:2x2", "v5e:2x2", (2, 2, 1), 4, "default", "TPU v5 lite"),
    ("v5e:2x4", "tpu:v5e:2x4", "v5e:2x4", (2, 4, 1), 8, "default", "TPU v5 lite"),
    ("v6e:8", "tpu:v6e:2x4", "v6e:2x4", (2, 4, 1), 8, "default", "TPU v6 lite"),
    (" V6E ", "tpu:v6e:1x1", "v6e:1x1", (1, 1, 1), 1, "default", "TPU v6 lite"),
    ("v4", "tpu:v4:2x2x1", "v4:2x2x1", (2, 2, 1), 4, "megacore", "TPU v4"),
    ("v5p:2x2x1", "tpu:v5p:2x2x1", "v5p:2x2x1", (2, 2, 1), 4, "megacore", "TPU v5"),
    ("tpu:v5e:2x2", "tpu:v5e:2x2", "v5e:2x2", (2, 2, 1), 4, "default", "TPU v5 lite"),
])
def test_a_target_names_a_generation_and_a_host(name, key, topology, bounds, devices, chip,
                                                kind):
    target = parse_tpu_target(name)
    assert target is not None
    assert (target.key, target.topology_name, target.host_bounds, target.device_count) == \
        (key, topology, bounds, devices)
    assert (target.generation.chip_config, target.generation.device_kind) == (chip, kind)
    assert is_tpu_key(target.key) and parse_tpu_target(target.key).key == key


@pytest.mark.parametrize("name", ["v5e:3x3", "v5e:2", "v7", "", "x86_64-avx2", "v4:1x1x1", 4])
def test_anything_else_names_none(name):
    assert parse_tpu_target(name) is None


def test_keys_are_never_cpu_target_names_and_the_description_lists_every_host():
    from hatch_jaxexport.formats.cpu_targets import TARGETS

    assert not any(is_tpu_key(name) for name in TARGETS)
    text = describe_tpu_targets()
    for generation in GENERATIONS.values():
        for devices, topology in generation.hosts.items():
            assert f"{devices} device(s): {generation.name}:{topology}" in text
