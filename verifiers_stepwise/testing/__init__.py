"""Test support shipped with the package, for this package's tests and for anyone building on it.

- ``verifiers_stepwise.testing.server``: a scripted OpenAI-compatible chat-completions server on
  127.0.0.1 (streaming and not, tool calls, fault injection).
- ``verifiers_stepwise.testing.traces``: verifiers v1 traces with token ids, built through
  verifiers' own turn-commit path as a train client would.

Nothing here is imported by ``import verifiers_stepwise``.
"""
