import sys

from torchdevlint.cli import main

sys.exit(main())
