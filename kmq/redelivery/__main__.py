import sys

from kmq.redelivery.cli import main

sys.exit(main())
