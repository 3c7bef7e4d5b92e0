"""Environments and the harness on the verifiers v1 API.

May import ``estimators``, ``traces`` and verifiers. ``env``: ``StepwiseMultiTurnEnv``, the turn
loop that records a reward per turn; ``refine``: any taskset as a refinement loop (env id
``stepwise-refine``); ``harness``: the in-process ``stepwise-chat`` harness; ``bundles``: the
installed environment bundles (entry points).
"""
