"""``python -m agent`` is the same program as ``hami-agent``."""

from agent.cli import main

raise SystemExit(main())
