"""dynamo-oss: gpt-oss deployments on NVIDIA Dynamo from one graph file."""
