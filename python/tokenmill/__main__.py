"""``python -m tokenmill``: the command line (see :mod:`tokenmill.cli`)."""

import sys

from tokenmill.cli import main

if __name__ == "__main__":
    sys.exit(main())
