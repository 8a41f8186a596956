"""One collector under every surface's load at once."""
