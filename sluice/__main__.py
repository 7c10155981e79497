"""``python -m sluice``: the same as the ``sluice`` console script."""

import sys

from sluice.cli import main

sys.exit(main())
