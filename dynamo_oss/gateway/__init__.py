"""The request gateway: the endpoint's own process in front of Dynamo's frontend, and the one that
meets the network. It checks what clients send before any worker sees it, knows who is asking
(auth.py, tenancy.py), bills each key (usage.py), and owns the APIs Dynamo 1.6 serves short of what
gpt-oss's clients need: the Responses API (responses/) and Anthropic's Messages API (messages/),
rendered into harmony token ids by the gateway itself (harmony/), so that Dynamo's frontend still
routes, disaggregates and reuses KV. Errors come back in OpenAI's shape (Anthropic's on its API),
never as a 5xx for a client's mistake.
"""
