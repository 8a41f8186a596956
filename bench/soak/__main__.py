"""``python -m bench.soak`` (``make soak``): the soak on its own."""

import sys

from bench.soak.run import main

main(sys.argv[1:])
