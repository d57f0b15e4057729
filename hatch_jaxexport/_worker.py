"""``python -m hatch_jaxexport._worker REQUEST.json``: one export worker (see ``build``)."""

import sys

from hatch_jaxexport.build import _worker_main

if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1]))
