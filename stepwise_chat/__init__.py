"""The ``stepwise-chat`` harness id, as verifiers' loader resolves it (``--env.agent.harness.id
stepwise-chat`` imports this module). The harness itself is ``verifiers_stepwise.envs.harness``."""

from verifiers_stepwise.envs.harness import StepwiseChatHarness

__all__ = ["StepwiseChatHarness"]
