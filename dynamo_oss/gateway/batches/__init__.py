"""OpenAI's Batch API: batches of requests from a kept file, run by the gateway in the capacity interactive traffic
leaves, their answers written to output and error files."""
