"""``python -m kohakutt``: the ``ktt`` command line."""

import sys

from kohakutt.cli import main

sys.exit(main())
