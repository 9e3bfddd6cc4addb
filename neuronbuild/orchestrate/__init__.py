"""How a plan gets built and checked: compile, scheduler, executors, shard, seal, costs, doctor,
verify.

- :mod:`.compile`: ``neuronbuild compile``'s work: plan, reuse what is cached, run the rest, seal;
- :mod:`.scheduler`: runs units on workers, with retries, within a memory budget;
- :mod:`.executor` and :mod:`.ray_executor`: where a unit's engine process runs (here, or on Ray);
- :mod:`.shard`: which units one of N shards builds (balanced by :mod:`.costs`);
- :mod:`.seal`: unit records into one manifest, and the ref move (for ``compile`` and ``seal``);
- :mod:`.report`: what a compile did, typed (one outcome per unit);
- :mod:`.events`: the observer a command passes in to hear units start and end;
- :mod:`.doctor`: why a unit misses (each differing factor);
- :mod:`.unit_state`: one diagnosis of a unit in a store, which ``doctor``, ``status`` and
  ``verify`` print; :mod:`.verify`: is everything a manifest references there and intact.

This package's ``__init__`` imports nothing: importing one module of the wing loads only that
module and what it needs. Nothing below the command line imports this wing; it imports the
kernel, the vocabulary, the engines and the store, never the ``ui`` wing: what a person reads
is the command line's to print, from the typed reports and the observer's plain fields.
"""
