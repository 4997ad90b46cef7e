import sys

from redelivery.cli import main

sys.exit(main())
