"""Learning benchmark scaffolding: tasks with a known optimum, a tabular policy, a trainer.

Kept out of the installed ``verifiers_stepwise`` package on purpose: it is a measuring
instrument for the estimators, not something a trainer integrating them needs. Run it with
``python benchmarks/learning.py`` (which puts this directory on ``sys.path``).

    tasks.py     the tasks as tensor tables (refinement, outcome-only, single-turn control)
    exact.py     exact success, expected return and true advantages by dynamic programming
    policy.py    tabular softmax policy and batched rollouts
    methods.py   estimators to compare, by registered name
    train.py     per-turn policy gradient with an estimator's advantages
    signal.py    quality of the per-turn advantage signal against the exact advantage
    report.py    markdown table and learning-curve plots
"""
