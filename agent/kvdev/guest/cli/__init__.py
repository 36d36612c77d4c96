"""``kvdev``: the guest's command line, a client of the agent's socket (and an offline validator).

``main`` owns the parser and ``metadata validate``, ``commands`` the commands that ask the
agent, ``client`` the socket client. It never imports the agent's loop, API or adapters (but
the file reader the validator uses).
"""
