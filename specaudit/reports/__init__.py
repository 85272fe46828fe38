"""Reporters: render a RunResult for people and for CI; they decide nothing.

Each module renders the same :class:`specaudit.results.RunResult` objects in one form:
``terminal`` (rich tables and the one-line verdict), ``sensitivity`` (power, ``plan`` and
``selftest`` tables), ``html`` with ``plots`` and ``templates/`` (one offline page), ``junit``,
``github`` (annotations and the job summary), ``json`` (the results file), ``assertion`` (the
``assert_lossless`` message) and ``progress`` (the live bar). Numbers are formatted once, in
``format``; tables are fitted to the console width in ``columns`` (no number or name cut). Verdicts come from the result objects, never from here, and only the CLI and the
pytest plugin import this package: the engine returns data and never prints.
"""
