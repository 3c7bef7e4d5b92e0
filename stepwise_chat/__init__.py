"""The ``stepwise-chat`` harness id, as verifiers' loader resolves it (``--env.agent.harness.id
stepwise-chat`` imports this module). The harness itself is ``verifiers_stepwise.harness``."""

from verifiers_stepwise.harness import StepwiseChatHarness

__all__ = ["StepwiseChatHarness"]
