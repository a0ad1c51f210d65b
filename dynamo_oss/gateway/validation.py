"""The checks a request passes before it reaches Dynamo's frontend. Each failure names the
field (`param`, as OpenAI does), says what was expected, and costs no worker anything."""

from __future__ import annotations

from jsonschema import Draft202012Validator, SchemaError

from dynamo_oss.gateway.errors import RETRY_AFTER_S, ApiError
from dynamo_oss.gateway.prompt import PromptCounter

# Dynamo's request extensions (`nvext`) a client may set. The others pick a worker, skip the router,
# set the cache salt, replace the prompt or the template, or ask for token ids: the gateway's to set.
CLIENT_EXTENSIONS = ("annotations",)
TOKEN_LIMIT_FIELDS = {
    "chat": ("max_tokens", "max_completion_tokens"),
    "completions": ("max_tokens",),
    "responses": ("max_output_tokens",),
    "messages": ("max_tokens",),
}


def check_request(api: str, body: object, models: dict[str, int], counter: PromptCounter | None) -> int:
    """Raise ApiError for the first thing wrong with a request to `api` (chat, completions, responses,
    messages); return the model's context window. A chat, Responses or Messages request's messages,
    input and tools are its route's to check (it types and renders them): only what every API shares
    is checked here for it."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    context = _check_model(body, models)
    limit = _check_token_limits(api, body, context)
    _check_choices(body)
    _check_extensions(body.get("nvext"))
    if counter is not None and context and api == "completions":
        _check_completion_prompt(body.get("prompt"), counter, context, limit)
    return context


def _check_model(body: dict, models: dict[str, int]) -> int:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "You must provide a model name as a string.", param="model")
    if not models:  # between a worker's exit and its restart: nothing is registered, for seconds
        raise ApiError(
            503,
            "No worker serves a model right now (workers are starting or restarting); retry shortly.",
            code="no_workers",
            retry_after=RETRY_AFTER_S,
        )
    if model not in models:
        served = ", ".join(sorted(models))
        raise ApiError(
            404,
            f"The model '{model}' does not exist. This endpoint serves: {served}.",
            param="model",
            code="model_not_found",
        )
    return models[model]


def _check_token_limits(api: str, body: dict, context: int) -> int:
    limit = 0
    for field in TOKEN_LIMIT_FIELDS[api]:
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ApiError(400, f"Invalid '{field}': {value!r}. Expected an integer of at least 1.", param=field)
        if context and value > context:
            raise ApiError(
                400,
                f"Invalid '{field}': {value}. It must not exceed the model's context of {context} tokens.",
                param=field,
                code="integer_above_max_value",
            )
        limit = max(limit, value)
    return limit


def check_parameters(parameters: object, param: str) -> None:
    """A tool's arguments must be described by a JSON Schema of an object, as OpenAI requires."""
    if not isinstance(parameters, dict):
        raise ApiError(400, f"Invalid '{param}': expected a JSON Schema object.", param=param)
    problem = parameters_problem(parameters)
    if problem is not None:
        raise ApiError(400, f"Invalid '{param}': {problem}.", param=param, code="invalid_function_parameters")


def parameters_problem(parameters: dict) -> str | None:
    """What keeps a tool's argument schema from being a JSON Schema of an object, if anything."""
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as err:
        return f"not a valid JSON Schema: {err.message}"
    if parameters.get("type", "object") != "object":
        return "function parameters must be a schema of type 'object'"
    return None


def _check_choices(body: dict) -> None:
    """One choice per request: Dynamo's frontend would answer n > 1 with a single choice, silently."""
    n = body.get("n")
    if n is None or (n == 1 and type(n) is int):
        return
    raise ApiError(
        400,
        f"Invalid 'n': {n!r}. Only n=1 is supported; send the request again for more choices.",
        param="n",
        code="unsupported_value",
    )


def _check_extensions(nvext: object) -> None:
    """Only the extensions a client may set (CLIENT_EXTENSIONS), each of its type."""
    if nvext is None:
        return
    if not isinstance(nvext, dict):
        raise ApiError(400, "Invalid 'nvext': expected an object.", param="nvext")
    for field, value in nvext.items():
        if field not in CLIENT_EXTENSIONS:
            raise ApiError(
                400,
                f"Invalid 'nvext.{field}': this endpoint takes only nvext."
                f"{', nvext.'.join(CLIENT_EXTENSIONS)} from clients; routing, caching and the prompt "
                "are the gateway's to set.",
                param=f"nvext.{field}",
                code="unsupported_parameter",
            )
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ApiError(400, f"Invalid 'nvext.{field}': expected an array of strings.", param=f"nvext.{field}")


def _check_completion_prompt(prompt: object, counter: PromptCounter, context: int, limit: int) -> None:
    """A completion's prompt (a string, a list of them, or token ids) against the context, as chat's is."""
    prompts = prompt if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else [prompt]
    for index, one in enumerate(prompts):
        param = "prompt" if len(prompts) == 1 else f"prompt[{index}]"
        if isinstance(one, list) and all(isinstance(token, int) for token in one):
            tokens = len(one)
        elif isinstance(one, str):
            tokens = len(one.encode()) if len(one.encode()) + limit <= context else counter.count_text(one)
        else:
            raise ApiError(400, f"Invalid '{param}': expected a string or a list of token ids.", param=param)
        if tokens + limit > context:
            raise ApiError(
                400,
                f"This model's maximum context length is {context} tokens. However, you requested "
                f"{tokens + limit} tokens ({tokens} in the prompt, {limit} in the completion). Please "
                "reduce the length of the prompt or completion.",
                param=param,
                code="context_length_exceeded",
            )
