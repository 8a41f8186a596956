"""``python -m collector`` is the same program as ``hami-collector``."""

from collector.cli import main

raise SystemExit(main())
