"""``python -m prfmap_docker``: the same as the ``prfmap-docker`` console script."""

import sys

from prfmap_docker.cli import main

sys.exit(main())
