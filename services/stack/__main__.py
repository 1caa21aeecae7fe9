"""``python -m stack``: the ``reviewloop`` command."""

import sys

from stack.cli import main

sys.exit(main())
