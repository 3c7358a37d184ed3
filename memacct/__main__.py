"""``python -m memacct`` runs the command line."""

import sys

from memacct.cli import main

sys.exit(main())
