"""One module per ``harness`` subcommand: docstring = help (with an example),
``add_arguments(parser)`` and ``main(args) -> int``."""


def set_threads(threads: int) -> None:
    """``--threads N`` of ``harness run`` / ``harness work``: torch's CPU threads (0 = torch's default).

    Raises:
        ValueError: ``N`` below 0 or above this machine's CPU cores (``os.cpu_count()``).
    """
    import os

    cores = os.cpu_count() or 1
    if not 0 <= threads <= cores:
        raise ValueError(
            f"--threads {threads}: expected 0 (torch's default) to {cores} (this machine's CPU cores)"
        )
    if threads:
        import torch

        torch.set_num_threads(threads)
