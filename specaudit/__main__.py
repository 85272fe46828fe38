"""``python -m specaudit``: the ``specaudit`` command, for environments where the console script is not on PATH.

The same CLI and exit codes as the console script: it calls :func:`specaudit.cli.script`, the
entry point ``[project.scripts]`` names.
"""

from specaudit.cli import script

if __name__ == "__main__":
    script()
