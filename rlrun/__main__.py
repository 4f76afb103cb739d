import sys

from rlrun.cli.main import main

sys.exit(main())
