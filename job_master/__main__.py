"""``python -m job_master --rm ADDR --job ID``: how node agents start a job master."""

import sys

from job_master.master import main

sys.exit(main())
