import sys

from tunetrain.cli import main

sys.exit(main())
