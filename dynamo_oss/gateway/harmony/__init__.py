"""gpt-oss's harmony format as every API of the gateway speaks it: a request's conversation rendered
into token ids (conversation.py, rendering.py), the plain completion of those ids asked of Dynamo's
frontend and its stream read back (completion.py), the answer parsed from the completion
(parsing.py), and reasoning sealed for clients that keep no state (sealing.py)."""
