import sys

from rlrun.cli import main

sys.exit(main())
