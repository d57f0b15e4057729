"""Old path of :mod:`hatch_jaxexport.formats.manifest`, kept for code written against 0.1."""

import sys

from hatch_jaxexport.formats import manifest

sys.modules[__name__] = manifest
