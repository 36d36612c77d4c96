"""CDI specs of KEP-5304 metadata mounts: the format (``spec``) and the reads (``ondisk``).

``spec`` holds the format as values, pure: names, writing, reading bounded; ``ondisk`` lists spec
directories and reads specs and the files their mounts name, confined. Only this package parses
CDI specs; ``publish``, ``bundle`` and ``relay`` import it.
"""
