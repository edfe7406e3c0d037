"""``python -m deepflow``: the same command line as the ``deepflow`` script."""

from deepflow.cli import main

if __name__ == "__main__":  # pragma: no branch
    main()
