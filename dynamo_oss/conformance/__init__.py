"""Conformance of an OpenAI endpoint serving gpt-oss: harmony rendered and parsed as it must be.

`cases.py` says what is checked, `replay.py` makes the harmony responses Dynamo's mocker
replays so the suite runs without a model, `runner.py` drives an endpoint with the openai
client, and `commands.py` is `dynamo conformance`.
"""
