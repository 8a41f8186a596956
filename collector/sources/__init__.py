"""Where data comes from: discovery (Kubernetes, files) and the pull of each target."""
