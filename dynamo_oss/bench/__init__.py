"""How fast a deployment does run: aiperf sweeps against an OpenAI endpoint (a graph this
package serves, or any URL), their results folders, Pareto plots and comparisons."""
