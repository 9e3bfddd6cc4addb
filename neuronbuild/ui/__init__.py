"""How a command meets a terminal: the error edge, options, verbosity, progress, tables, log tails.

- :mod:`.console`: the one place a :class:`~neuronbuild.errors.UserError` becomes a line and an
  exit code (and ``--json``'s error document);
- :mod:`.options`: the options every command shares;
- :mod:`.verbosity`: ``-q``/``-v``, read by every printer;
- :mod:`.progress`: bars on a terminal, heartbeat lines in a log;
- :mod:`.formatting`: aligned tables and colour;
- :mod:`.logtail`: the last lines of a log.

This package's ``__init__`` imports nothing. Only the command line (:mod:`neuronbuild.cli`), the
runtime and the demo import this wing; the layers below report through callbacks and typed
results, and never print.
"""
