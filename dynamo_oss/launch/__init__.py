"""How a graph runs on one host: infrastructure, supervision, readiness, restart and drain."""
