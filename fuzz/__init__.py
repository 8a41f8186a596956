"""Fuzz targets over every parser of outside input; ``python -m fuzz`` runs them (``make fuzz``)."""
