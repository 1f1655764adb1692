"""One module per ``r3`` subcommand, each written like a Spack command."""
