"""POST /v1/chat/completions, owned by the gateway: rendered into harmony (conversation.py), run as a
plain completion of those token ids (harmony/completion.py), and the answer built from the
completion's token ids (stream.py), as the Responses and Messages APIs are."""
