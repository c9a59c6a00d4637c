"""``python -m lbm``: the command line."""

import sys

from lbm.cli import main

if __name__ == "__main__":
    sys.exit(main())
