"""The autoscaler: Dynamo's planner as this project runs it.

Its settings for a deployment (`settings`), the stand-ins its process needs here (`standins`),
how its process starts (`__main__`), and the actuator that carries out its decisions on one host
(`actuator`). The renderers (deployment.host, deployment.kubernetes) take its settings as data,
so one host and a cluster run the same planner configuration.
"""
