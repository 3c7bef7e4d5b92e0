"""The ``vf-stepwise`` command: what credit does to real rollouts.

May import every layer below it; verifiers, rich and matplotlib only when a command runs.
``cli``: the command; ``tracefile``: streaming traces.jsonl into grouped per-turn rewards;
``stats``: per-turn-index statistics; ``report``: tables and the per-turn JSONL; ``plot``: the
figure; ``flags``: command-line flags generated from an estimator's config.
"""
