"""``python -m kmq.cli``: the ``kmq`` command."""

import sys

from kmq.cli.app import main

sys.exit(main())
