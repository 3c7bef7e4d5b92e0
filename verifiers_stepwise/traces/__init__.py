"""Per-turn rewards on verifiers v1 traces, and the one credit record made from them.

May import ``estimators``; reads traces through their attributes and imports verifiers only
for type checking. ``turns``: the per-turn schema (``trace.info["turn_rewards"]``,
``["turn_nodes"]``); ``credit``: ``score_group`` (an estimator on a group of episodes, one
``Credit`` record per trace), ``write_credit`` and ``lay_out`` (the record on tokens).
"""
