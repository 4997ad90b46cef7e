"""``spark-submit kmq/ops/audit/__main__.py --config kmq.yaml [...]``: the audit on a cluster (same options)."""

import sys

from kmq.cli import main

sys.exit(main(["audit", *sys.argv[1:]]))
