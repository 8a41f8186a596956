"""The push API under the load of 5,000 agents."""
