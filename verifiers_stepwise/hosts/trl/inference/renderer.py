"""Renderers that extend a conversation token by token: plain text for base models, Gemma's turns.

``TextRenderer`` (the default, ``--format text``) writes the conversation as one document, each
message's text as it is, every reply ended by a newline::

    <bos>{system}{user prompt} 28
    {feedback} 31
    ...

so a base model continues a completion-style prompt (``stepwise-sums``: solved examples, then
the task's ``34 + 7 =``) and its reply stops at the first newline. ``TurnFormatRenderer``
(``--format turns``) writes Gemma's chat turns::

    <bos><start_of_turn>user
    {system}\\n\\n{user}<end_of_turn>
    <start_of_turn>model
    {reply}<end_of_turn>
    <start_of_turn>user
    {feedback}<end_of_turn>
    <start_of_turn>model

(Gemma 3 has no system or tool role: a system prompt opens the first user turn, a tool result
is a user turn), for a model tuned on that format; any tokenizer with the two turn tokens can use it.

Why not renderers' ``DefaultRenderer``: it re-renders the whole conversation every turn, so a
reply whose sampled tokens do not re-tokenize to themselves would fork the trace graph into
several training samples. Both renderers' ``bridge_to_next_turn`` keep every earlier token
verbatim and append only the new turns: an episode stays one branch, one TRL sample. Checked
against renderers 0.1.12 as verifiers 0.4.0's train client uses it.
"""

from __future__ import annotations

from typing import Any

from verifiers_stepwise.errors import ConfigError
from verifiers_stepwise.extras import requires

with requires("verifiers_stepwise.hosts.trl", "renderers", extra="trl"):
    from renderers import DefaultRendererConfig, RenderedTokens
    from renderers.base import trim_to_turn_close
    from renderers.default import DefaultRenderer

__all__ = ["END_OF_TURN", "FORMATS", "START_OF_TURN", "TextRenderer", "TurnFormatRenderer", "renderer_config"]

START_OF_TURN = "<start_of_turn>"
END_OF_TURN = "<end_of_turn>"
_ROLES = {"user": "user", "system": "user", "tool": "user", "assistant": "model"}


def renderer_config(format: str) -> Any:
    """The ``renderer`` field of ``vf.TrainClientConfig`` that selects ``FORMATS[format]``."""
    from renderers.configs import CustomRendererConfig

    if format not in FORMATS:
        raise ConfigError(f"unknown format {format!r}; choose one of {sorted(FORMATS)}")
    return CustomRendererConfig(import_path=f"{__name__}.{FORMATS[format].__name__}")


class _ExtendingRenderer(DefaultRenderer):
    """Shared by both formats: earlier tokens kept verbatim, new user/tool turns appended.

    A subclass sets ``_close`` (the token that closes a cut reply) and ``_stops`` (the tokens that
    end a reply, the tokenizer's eos besides) and writes ``_document`` (a whole conversation after
    ``<bos>``) and ``_user_turn`` (one appended user message).
    """

    config_class = DefaultRendererConfig
    _close: int
    _stops: list[int]

    def get_stop_token_ids(self) -> list[int]:
        eos = self._tokenizer.eos_token_id
        return [*self._stops, *([eos] if eos is not None and eos not in self._stops else [])]

    @property
    def is_prefix_stable(self) -> bool:
        return True

    def _document(self, messages: Any) -> list[int]:
        raise NotImplementedError

    def _user_turn(self, content: str) -> list[int]:
        raise NotImplementedError

    def _generation_prompt(self) -> list[int]:
        """Tokens that open the model's reply (none by default)."""
        return []

    def _apply(self, messages: Any, *, tools: Any = None, add_generation_prompt: bool = False) -> list[int]:
        name = type(self).__name__
        if tools:
            raise ValueError(f"{name} renders no tools")
        unknown = [m.get("role") for m in messages if m.get("role") not in _ROLES]
        if unknown:
            raise ValueError(f"{name}: unknown message role {unknown[0]!r}")
        bos = self._tokenizer.bos_token_id
        prompt = self._generation_prompt() if add_generation_prompt else []
        return ([bos] if bos is not None else []) + self._document(messages) + prompt

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: Any,
        *,
        tools: Any = None,
    ) -> RenderedTokens | None:
        """``previous prompt + sampled reply (+ the close token if cut)`` then the new user/tool
        turns and the generation prompt; None (re-render) when the new messages hold an
        assistant turn, which the model did not sample."""
        if tools or not previous_prompt_ids or not new_messages:
            return None
        if any(_ROLES.get(m.get("role")) != "user" for m in new_messages):
            return None
        previous = trim_to_turn_close(
            previous_prompt_ids, previous_completion_ids, {self._close}, synthesize_close=self._close
        )
        ids, indices = self._after_close(), [-1] * len(self._after_close())
        for i, message in enumerate(new_messages):
            turn = self._user_turn(_text(message.get("content")))
            ids += turn
            indices += [i] * len(turn)
        prompt = self._generation_prompt()
        ids += prompt
        indices += [-1] * len(prompt)
        return RenderedTokens(
            token_ids=previous + ids,
            message_indices=[-1] * len(previous) + indices,
            sampled_mask=[False] * (len(previous) + len(ids)),
            message_roles=[m.get("role") or "" for m in new_messages],
        )

    def _after_close(self) -> list[int]:
        """Tokens between a reply's close and the next turn (none by default)."""
        return []


class TextRenderer(_ExtendingRenderer):
    """Plain text: messages' texts as they are, a reply ends at a newline token (module docstring).

    Stop tokens are every token that is nothing but newlines (Gemma has 32), so a reply stops
    at its first line break whichever newline token the model drew; the close token synthesized
    for a cut reply is ``"\\n"``.
    """

    def __init__(self, tokenizer: Any, config: DefaultRendererConfig | None = None) -> None:
        super().__init__(tokenizer, config)
        (self._close,) = tokenizer.encode("\n", add_special_tokens=False)
        self._stops = sorted(
            i
            for token, i in tokenizer.get_vocab().items()
            if set(tokenizer.convert_tokens_to_string([token])) == {"\n"}
        )

    def _user_turn(self, content: str) -> list[int]:
        return self._tokenizer.encode(content, add_special_tokens=False)

    def _document(self, messages: Any) -> list[int]:
        text = "".join(_text(m.get("content")) + ("\n" if _ROLES[m["role"]] == "model" else "") for m in messages)
        return self._tokenizer.encode(text, add_special_tokens=False)


class TurnFormatRenderer(_ExtendingRenderer):
    """Gemma turn format; ``parse_response`` is renderers' default (decode, stop tokens stripped)."""

    def __init__(self, tokenizer: Any, config: DefaultRendererConfig | None = None) -> None:
        super().__init__(tokenizer, config)
        vocab = tokenizer.get_vocab()
        missing = [token for token in (START_OF_TURN, END_OF_TURN) if token not in vocab]
        if missing:
            raise ValueError(f"TurnFormatRenderer: tokenizer {tokenizer.name_or_path!r} has no token {missing}")
        self._start = vocab[START_OF_TURN]
        self._close = vocab[END_OF_TURN]
        self._stops = [self._close]
        self._newline = tokenizer.encode("\n", add_special_tokens=False)

    def _turn(self, role: str, content: str) -> list[int]:
        body = self._tokenizer.encode(f"{role}\n{content}", add_special_tokens=False)
        return [self._start, *body, self._close, *self._newline]

    def _user_turn(self, content: str) -> list[int]:
        return self._turn("user", content)

    def _after_close(self) -> list[int]:
        return list(self._newline)

    def _generation_prompt(self) -> list[int]:
        return [self._start, *self._tokenizer.encode("model\n", add_special_tokens=False)]

    def _document(self, messages: Any) -> list[int]:
        ids: list[int] = []
        system = ""
        for message in messages:
            role, content = message["role"], _text(message.get("content"))
            if role == "system":
                system += content + "\n\n"
                continue
            if system and _ROLES[role] == "user":
                content, system = system + content, ""
            ids += self._turn(_ROLES[role], content)
        if system:  # a system prompt with nothing after it
            ids += self._turn("user", system.rstrip("\n"))
        return ids


FORMATS: dict[str, type[_ExtendingRenderer]] = {"text": TextRenderer, "turns": TurnFormatRenderer}
"""``--format`` values and the renderer each selects."""


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))
