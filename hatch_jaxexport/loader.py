"""Old path of :mod:`hatch_jaxexport.runtime.loader`, kept for code written against 0.1."""

import sys

from hatch_jaxexport.runtime import loader

sys.modules[__name__] = loader
