"""Use cases both front doors call: each joins stages for one operation (the CLI's commands and the API's routes
parse, call one of these, and print or answer; nothing here reads the environment or prints)."""
