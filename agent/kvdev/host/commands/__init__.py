"""The ``kvdev-host`` commands, one module each.

Each command module exposes ``register(commands)``: it adds its sub-parser (help, examples,
exit codes) to the ``argparse`` sub-parsers object and sets ``run`` as the parser default, a
callable ``(args, out, err) -> exit status``. ``kvdev.host.cli`` owns the top-level parser
and the dispatch; modules here share ``common`` (exit codes, the parser class, reading and
printing objects).
"""
