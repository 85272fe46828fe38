"""Scenarios: what an audit runs, as YAML files validated into frozen dataclasses; all validation lives here.

``schema`` holds the classes (`Scenario`, the chain kinds, `TreeSpec`, `AdapterSpec`), their rules
and their pydantic validator, built on first use; ``loading`` reads a YAML file into a
`LoadedScenario`, from ``cache`` (the validated scenarios remembered on disk) when the text was
validated before, else through ``parsing`` (PyYAML, pydantic and the ``file:line: key.path:``
messages); ``catalogue`` knows the shipped scenarios, the default suite and how ``--scenario``
values resolve. The names below are re-exported so that ``from specaudit.scenarios import
load_scenario`` keeps working as it did when this folder was one module.
"""

from specaudit.scenarios.catalogue import default_suite, json_schema, resolve, shipped, shipped_paths
from specaudit.scenarios.loading import LoadedScenario, load_scenario, parse_scenario
from specaudit.scenarios.schema import MAX_JOINT_CELLS, MAX_TREE_NODES, SCHEMA_VERSION, SUM_TOLERANCE, Scenario

__all__ = [
    "MAX_JOINT_CELLS",
    "MAX_TREE_NODES",
    "SCHEMA_VERSION",
    "SUM_TOLERANCE",
    "LoadedScenario",
    "Scenario",
    "default_suite",
    "json_schema",
    "load_scenario",
    "parse_scenario",
    "resolve",
    "shipped",
    "shipped_paths",
]
