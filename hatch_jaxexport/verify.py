"""Old path of :mod:`hatch_jaxexport.build.verify`, kept for code written against 0.1."""

import sys

from hatch_jaxexport.build import verify

sys.modules[__name__] = verify
