"""What the tests share that is not a fixture: free ports, waiting on a condition, running `dynamo`,
serving a graph and writing the small graphs tests serve. Fixtures live in the conftest files."""
