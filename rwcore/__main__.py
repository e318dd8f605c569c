"""``python -m rwcore``: the RW1 command line (see ``rwcore._cli``)."""

import sys

from rwcore._cli import main

if __name__ == "__main__":
    sys.exit(main())
