"""Per-turn rewards on verifiers v1 traces and credit written onto each turn's tokens.

May import ``estimators``; reads traces through their attributes and imports verifiers only
for type checking. ``turns``: the per-turn schema (``trace.info["turn_rewards"]``,
``["turn_nodes"]``); ``credit``: ``score_group``, an estimator applied to a group of episodes.
"""
