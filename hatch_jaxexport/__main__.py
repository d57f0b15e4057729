"""``python -m hatch_jaxexport``: the command-line interface."""

import sys

from hatch_jaxexport.integrations.cli import main

if __name__ == "__main__":
    sys.exit(main())
