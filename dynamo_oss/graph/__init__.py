"""What a graph file may say: its schema, its loader, and errors that name the field."""
