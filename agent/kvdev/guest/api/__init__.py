"""The agent's local API: HTTP/1.1 + JSON on a Unix socket, answered from the loop's state.

``server`` and ``httpconn`` are a generic socket server (they know nothing of kvdev),
``routes`` maps paths to answers, ``bridge`` hands requests between the API's thread and the
reconcile loop.
"""
