"""The token endpoint's routes (``generate_routes``, served in the running loop as torchtitan's
host serves them) speak what renderers' ``generate`` (verifiers 0.4.0's train client) reads."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
from openai import APIStatusError, AsyncOpenAI
from renderers import ParsedResponse
from renderers.client import generate

from verifiers_stepwise.hosts.token_endpoint import SESSION_HEADER, Generation, generate_routes
from verifiers_stepwise.loopback import serve


@contextlib.asynccontextmanager
async def endpoint_url(answer):
    """The base URL of ``answer`` served as torchtitan's host serves its generator."""
    runner, port = await serve(generate_routes(answer, failure_status=503))
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


class _Renderer:
    """What ``generate`` asks of a renderer when the prompt ids are given."""

    def get_stop_token_ids(self):
        return [9]

    def parse_response(self, completion_ids, prompt_ids=None, tools=None):
        return ParsedResponse(content=" ".join(map(str, completion_ids)), tool_calls=[])


def call(reply):
    seen = []

    async def answer(request):
        seen.append(request)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def go():
        async with endpoint_url(answer) as base_url:
            client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)
            result = await generate(
                client=client,
                renderer=_Renderer(),
                messages=[{"role": "user", "content": "hi"}],
                model="policy",
                prompt_ids=[1, 2, 3],
                sampling_params={"max_tokens": 8, "seed": 4},
                extra_headers={"X-Session-ID": "trace-1"},
            )
            await client.close()
            return result

    return asyncio.run(go()), seen


def test_a_reply_reaches_the_train_client_with_its_tokens_and_logprobs():
    result, (request,) = call(Generation([5, 6, 9], [-0.5, -0.25, -0.125], "stop"))
    assert (result["completion_ids"], result["completion_logprobs"]) == ([5, 6, 9], [-0.5, -0.25, -0.125])
    assert result["prompt_ids"] == [1, 2, 3] and result["finish_reason"] == "stop"
    assert request.prompt_ids == [1, 2, 3] and request.headers[SESSION_HEADER] == "trace-1"
    assert request.sampling["max_tokens"] == 8 and request.sampling["seed"] == 4
    assert request.sampling["stop_token_ids"] == [9] and request.sampling["logprobs"] == 1


@pytest.mark.parametrize("reply", [None, RuntimeError("generator down")])
def test_no_completion_is_an_http_503_the_client_sees(reply):
    with pytest.raises(APIStatusError) as error:
        call(reply)
    assert error.value.status_code == 503
    assert ("generator down" if reply else "no completion") in error.value.response.text


def test_a_reply_has_one_logprob_per_token():
    with pytest.raises(ValueError, match="2 completion tokens but 1 logprobs"):
        Generation([1, 2], [-0.5])


def test_a_malformed_request_is_an_http_400_naming_the_field():
    async def go():
        async with endpoint_url(lambda request: None) as base_url:
            url = base_url.removesuffix("/v1") + "/inference/v1/generate"
            async with httpx.AsyncClient() as http:
                return await http.post(url, json={"token_ids": [1], "sampling_params": {"top_p": 0}})

    response = asyncio.run(go())
    assert response.status_code == 400 and "top_p" in response.text
