"""What a deployment is: the graph file schema and its resolution into a host plan."""
