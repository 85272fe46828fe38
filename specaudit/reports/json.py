"""JSON report: writes the results document (`specaudit.results.document`), the input of every other report."""

from specaudit.results.document import (  # noqa: F401 - the reporter's interface
    SCHEMA_VERSION,
    document,
    from_dict,
    read,
    read_document,
    scenario_checks,
    to_dict,
    write,
)
