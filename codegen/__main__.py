import sys

from mmcodec.codegen.cli import main

sys.exit(main())
