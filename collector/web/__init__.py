"""HTTP outputs: they only read the store."""
