"""``python -m lbm`` with the 2D in-place pair chosen at every size (lbm.engines.pallas.aa.AA2D_MIN_BYTES and
AA2D_ALONE_MIN_BYTES = 0; the first session, 2026-12-07, set the first only, which was then the only one): a
measurement's tool (scripts/device_pair_small.sh), not the product's rule.

    python scripts/pair_anywhere.py bench lattice=d2q9 "cases=[cavity]" "variants=[pallas,xla]" ...
"""

import sys

from lbm.cli import main
from lbm.engines.pallas import aa

if __name__ == "__main__":
    aa.AA2D_MIN_BYTES = aa.AA2D_ALONE_MIN_BYTES = 0
    sys.exit(main())
