"""The request gateway: a thin process in front of Dynamo's frontend that turns bad requests
into OpenAI-style 4xx errors before they reach a worker.

Dynamo 1.6's frontend accepts a tool schema that is not JSON Schema, answers a prompt longer
than the context with a 500 once the worker refuses it, and writes its errors as
`{"message", "type", "code"}` rather than OpenAI's `{"error": {...}}`; its extension hook
only adds GET routes, so the checks live here. Responses stream through untouched.
"""
