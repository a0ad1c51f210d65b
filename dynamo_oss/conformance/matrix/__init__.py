"""The harmony correctness matrix: every API x streaming x tool choice x structured output x effort.

`cells.py` names the combinations and the request each one sends, `exchange.py` sends it with the
API's official client and checks the raw answer against that client's types, `properties.py`
judges what held, and `run.py` repeats every cell and tabulates the verdicts.
"""
