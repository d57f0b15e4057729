"""Old path of :mod:`hatch_jaxexport.integrations.cli`, kept for code written against 0.1."""

import sys

from hatch_jaxexport.integrations import cli

sys.modules[__name__] = cli
