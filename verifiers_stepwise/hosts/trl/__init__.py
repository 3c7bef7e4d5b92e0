"""TRL host: ``GRPOTrainer`` on verifiers episodes with stepwise credit (``pip install 'verifiers-stepwise[trl]'``).

    trainer     StepwiseGRPOTrainer: the GRPOTrainer subclass, its rollout function and metrics
    rollout     episodes → TRL samples (prompt/completion ids, env mask, per-token advantages)
    endpoint    TokenEndpoint: the token endpoint, batching the waiting requests for the model
    sampling    ModelSampler: the trainer's model answering the token endpoint
    renderer    TurnFormatRenderer: Gemma's turn format, extended token by token
    model       the default policy, Gemma 3 270M from the PyPI GGUF (extra [trl-model])
    cli         ``python -m verifiers_stepwise.hosts.trl`` (TRL's argument parser)

Checked against TRL 1.16.0, transformers 5.24.0, verifiers 0.4.0, renderers 0.1.12.
"""
