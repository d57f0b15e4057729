"""TPU targets a build compiles for without a TPU: a generation and a host's chips.

libtpu describes TPU hosts that are not attached (``jax.experimental.topologies.
get_topology_desc``): the same client a TPU VM's process has, with the same platform version
(libtpu's build), and an XLA:TPU compiler that compiles for it on any Linux x86-64 machine.
So a release pipeline with no TPU compiles TPU executables like it compiles the CPU's: a build
names TPU targets (``tpu-targets = ["v5e", "v5e:2x2", "v6e"]``), each a generation and the
topology of one host, and compiles every artifact that can have an executable for each.

The host's topology is part of the target: the same one-device program compiled within a
``v5e:1x1`` and a ``v5e:2x2`` description gives other bytes (measured with libtpu 0.0.42.1),
so an executable records the number of devices of the host it was compiled for
(``ExecutableRecord.host_device_count``) and the loader serves it on such a host only.

Pure: no jax, nothing read at import. The build turns a ``TpuTarget`` into a topology
(``bake.executables._compiler``); tests read the table on any machine.
"""

from __future__ import annotations

from hatch_jaxexport.formats.cpu_targets import canonical_target

#: The prefix of a TPU target's key among a build's executable targets (``tpu:v5e:2x2``):
#: never a name of ``formats.cpu_targets.TARGETS``.
KEY_PREFIX = "tpu:"


class Generation:
    """A TPU generation libtpu describes: its name in the topology (``v5e``), its chip
    configuration, the device kind its devices report, and the single-host topologies a
    build can name, by device count (a slotted class, as ``cpu_targets.Target`` says why)."""

    __slots__ = ("chip_config", "device_kind", "hosts", "name")

    def __init__(self, name: str, chip_config: str, device_kind: str,
                 hosts: dict[int, str]) -> None:
        self.name, self.chip_config, self.device_kind = name, chip_config, device_kind
        #: Devices on the host -> the topology's name after the generation (``2x2``).
        self.hosts = hosts


#: The generations and hosts, as libtpu 0.0.42.1 describes them on a CPU-only machine (each
#: checked by ``tests/integration/test_deviceless_tpu.py`` where libtpu installs). v4 and v5p run
#: their two cores as one device (``megacore``).
GENERATIONS: dict[str, Generation] = {
    "v4": Generation("v4", "megacore", "TPU v4", {4: "2x2x1"}),
    "v5p": Generation("v5p", "megacore", "TPU v5", {4: "2x2x1"}),
    "v5e": Generation("v5e", "default", "TPU v5 lite", {1: "1x1", 4: "2x2", 8: "2x4"}),
    "v6e": Generation("v6e", "default", "TPU v6 lite", {1: "1x1", 4: "2x2", 8: "2x4"}),
}


class TpuTarget:
    """One TPU host a build compiles for: a generation and one of its host topologies."""

    __slots__ = ("generation", "topology")

    def __init__(self, generation: Generation, topology: str) -> None:
        self.generation, self.topology = generation, topology

    @property
    def key(self) -> str:
        """The target's key among the build's executable targets: ``tpu:v5e:2x2``."""
        return f"{KEY_PREFIX}{self.generation.name}:{self.topology}"

    @property
    def topology_name(self) -> str:
        """The name ``get_topology_desc`` takes: ``v5e:2x2``."""
        return f"{self.generation.name}:{self.topology}"

    @property
    def device_count(self) -> int:
        """The devices of the host (the product of the topology's sizes)."""
        count = 1
        for size in self.topology.split("x"):
            count *= int(size)
        return count

    @property
    def host_bounds(self) -> tuple[int, int, int]:
        """``chips_per_host_bounds`` of ``get_topology_desc``: the topology, as three sizes."""
        x, y, z = [*(int(size) for size in self.topology.split("x")), 1, 1, 1][:3]
        return x, y, z


def parse_tpu_target(text: str) -> TpuTarget | None:
    """A target from its name in a build's configuration, ``None`` where it names none:
    ``v5e`` (the generation's smallest host), ``v5e:2x2`` (a topology) or ``v5e:4`` (a host
    of 4 devices); its key (``tpu:v5e:2x2``) is accepted too."""
    if not isinstance(text, str):
        return None
    name, _, host = text.removeprefix(KEY_PREFIX).strip().lower().partition(":")
    generation = GENERATIONS.get(name)
    if generation is None:
        return None
    if not host:
        return TpuTarget(generation, generation.hosts[min(generation.hosts)])
    if host.isdigit():
        topology = generation.hosts.get(int(host))
        return TpuTarget(generation, topology) if topology else None
    return TpuTarget(generation, host) if host in generation.hosts.values() else None


def executable_target(name: object) -> str | None:
    """The name a build records for an executable target a maintainer wrote: a CPU target's
    ``cpu_targets.TARGETS`` name (``x86-64-v3`` is ``x86_64-avx2``), a TPU host's key (``v5e``
    and ``tpu:v5e`` are ``tpu:v5e:1x1``); ``None`` for neither. The build's options, the
    command line and ``@exportable(executables=...)`` all read names through this."""
    if not isinstance(name, str):
        return None
    tpu = parse_tpu_target(name)
    return tpu.key if tpu is not None else canonical_target(name)


def is_tpu_key(target: str) -> bool:
    """Whether a build's executable target is a TPU target's key (``tpu:v5e:1x1``)."""
    return target.startswith(KEY_PREFIX)


def describe_tpu_targets() -> str:
    """Every name a build can give, for messages: ``v4 (4 devices: v4:2x2x1), ...``."""
    return "; ".join(
        f"{g.name} ({', '.join(f'{n} device(s): {g.name}:{t}' for n, t in g.hosts.items())})"
        for g in GENERATIONS.values())


__all__ = ["GENERATIONS", "KEY_PREFIX", "Generation", "TpuTarget", "describe_tpu_targets",
           "executable_target", "is_tpu_key", "parse_tpu_target"]
