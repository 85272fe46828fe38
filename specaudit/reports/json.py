"""JSON report: writes the results document (`specaudit.documents`), the input of every other report."""

from specaudit.documents import (  # noqa: F401 - the reporter's interface
    SCHEMA_VERSION,
    document,
    from_dict,
    read,
    read_document,
    scenario_checks,
    to_dict,
    write,
)
