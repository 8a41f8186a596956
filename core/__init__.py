"""The small core both programs share: settings machinery, logging, task supervision,
content types and the push wire model.

It imports neither ``collector`` nor ``agent``: the agent imports only this, and
the collector never imports the agent.
"""
