"""The deployment a graph describes, belonging to no host, and the renderers that place it.

graph file -> GraphSpec (graph) -> Deployment (model.py) -> HostPlan (host.py), and later
Kubernetes manifests, a scrape config and a planner config from the same Deployment.
"""
