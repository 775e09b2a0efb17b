"""One module per `cope` subcommand; each has `register(subparsers)`."""
