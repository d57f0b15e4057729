"""Layer 4, integrations: thin adapters between a tool and the build layer.

The Hatch plugin and hook, the setuptools plugin and command, the pytest plugin and the command
line. Each holds only what differs for its tool; what two of them need lives in ``bake``. May
import every layer below; nothing of ours imports it.
"""

__all__ = ["cli", "hatch_plugin", "pytest_plugin", "setuptools_plugin"]
