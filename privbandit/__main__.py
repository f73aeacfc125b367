"""``python -m privbandit``: the same command line as the ``privbandit`` script."""

from privbandit.cli import main

if __name__ == "__main__":
    main()
