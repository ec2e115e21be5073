"""``python -m mmcodec.demo``: see :mod:`mmcodec.demo`."""

import sys

from mmcodec.demo.sender import main

if __name__ == "__main__":
    sys.exit(main())
