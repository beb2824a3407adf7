import sys

from benches.cli import main

sys.exit(main())
