"""kvdev-host's one wire to the Kubernetes API server, for the controller, the plugin and the relay.

``client`` loads the configuration and builds the rate-limited client; ``errors`` maps every
answer and transport failure once to typed errors; ``wire`` holds the calls (lists, watches and
the object verbs) as raw JSON. Only this package imports ``kubernetes`` and ``urllib3``.
"""
