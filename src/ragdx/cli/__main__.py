"""``python -m ragdx.cli``: the ``ragdx`` command."""

import sys

from ragdx.cli import main

sys.exit(main())
