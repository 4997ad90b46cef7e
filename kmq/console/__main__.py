"""``python -m kmq.console``: the web console (kmq.console.command)."""

import sys

from kmq.console.command import main

sys.exit(main())
