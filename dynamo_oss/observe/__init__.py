"""How operators watch a graph: Grafana dashboards as code, over the metrics Prometheus scrapes."""
