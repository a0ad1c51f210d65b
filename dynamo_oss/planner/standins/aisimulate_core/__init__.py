"""A stand-in for aisimulate_core, which only Dynamo's planner process sees (`python -m dynamo_oss.planner`).

Dynamo 1.6's planner imports two names from aisimulate_core at start-up, for its AISimulate
performance model. ai-dynamo requires aisimulate, but its PyPI release is a stub that downloads
from a host this project cannot reach, so it is never installed (pyproject's override). The
planner's load-based scaling never uses the model; using it through this stand-in fails loudly.
"""
