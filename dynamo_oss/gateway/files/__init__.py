"""OpenAI's Files API, as far as the Batch API needs it: batch input files uploaded, and the output and
error files of batches, kept in the graph's NATS object store for the key that made them."""
