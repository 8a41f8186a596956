"""Test doubles and oracles shared by tests/ and bench/; not shipped in the wheel."""
