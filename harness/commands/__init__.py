"""One module per ``harness`` subcommand: docstring = help (with an example),
``add_arguments(parser)`` and ``main(args) -> int``."""

from harness.train.execution import set_threads

__all__ = ["set_threads"]
