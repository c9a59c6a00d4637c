"""``python -m lbm`` with the 2D in-place pair chosen from another size (lbm.engines.pallas.aa.AA2D_MIN_BYTES; from
every size unless PAIR_FROM_MIB names one, e.g. 128 for the rule before the fourteenth session, when the push rows
kernel ran a wall-free box up to 128 MiB): a measurement's tool (scripts/device_pair_small.sh, device_push_pair.sh),
not the product's rule.

    python scripts/pair_anywhere.py bench lattice=d2q9 "cases=[cavity]" "variants=[pallas,xla]" ...
"""

import os
import sys

from lbm.cli import main
from lbm.engines.pallas import aa

if __name__ == "__main__":
    aa.AA2D_MIN_BYTES = int(float(os.environ.get("PAIR_FROM_MIB", "0")) * 2**20)
    sys.exit(main())
