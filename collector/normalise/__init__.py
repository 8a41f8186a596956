"""The canonical schema, and what turns every source's readings into it.

:mod:`.schema` (the ``hami_*`` families and each flavour's names),
:mod:`.labelsets` (the one way every producer keys a series), :mod:`.bodies`
(a monitor's exposition body → canonical series, through the body's
:mod:`.layout`), :mod:`.allocation` (a pod object → what it was given), and
:mod:`.batch`, what the stage hands the store.
"""
