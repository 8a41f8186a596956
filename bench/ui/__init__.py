"""The views for people at cluster size: server time of each page beside REST's (``python -m bench ui``)."""
