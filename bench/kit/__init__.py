"""The benches' shared toolkit: processes, timing, the simulated cluster and its monitors, tables."""
