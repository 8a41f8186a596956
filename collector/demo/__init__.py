"""Demo helpers: a deterministic simulator of the per-node GPU monitors and an HTTP farm."""
