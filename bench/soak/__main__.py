"""``python -m bench.soak`` (``make soak``): the same as ``python -m bench soak``."""

import sys

from bench.__main__ import cli

cli(["soak", *sys.argv[1:]])
