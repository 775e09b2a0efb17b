"""Exit codes of every `cope` command (documented in the README)."""

EXIT_OK = 0
EXIT_INTERNAL = 1  # a bug: the message and traceback go to stderr
EXIT_INPUT = 2  # bad input: one line on stderr naming the file or flag
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2
EXIT_TERMINATED = 143  # SIGTERM, handled like Ctrl-C (caches left valid): 128 + 15
