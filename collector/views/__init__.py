"""The read model: one computation of the usage numbers behind REST, the CSV and the pages.

:mod:`.usage` parses a node's view once, :mod:`.presented` shapes it into the
rows both surfaces show, :mod:`.cache` keeps one presented form per node.
``collector/web/rest`` and ``collector/web/ui`` format these; neither imports
the other.
"""
