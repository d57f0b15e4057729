"""Old path of :mod:`hatch_jaxexport.build.warmup`, kept for code written against 0.1."""

import sys

from hatch_jaxexport.build import warmup

sys.modules[__name__] = warmup
