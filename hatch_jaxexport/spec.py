"""Old path of :mod:`hatch_jaxexport.formats.spec`, kept for code written against 0.1."""

import sys

from hatch_jaxexport.formats import spec

sys.modules[__name__] = spec
