"""Scenarios: what an audit runs, as YAML files validated into frozen models; all validation lives here.

``schema`` holds the pydantic models (`Scenario`, the chain kinds, `TreeSpec`, `AdapterSpec`) and
their rules; ``loading`` reads a YAML file into a `LoadedScenario` with ``file:line: key.path:``
messages; ``catalogue`` knows the shipped scenarios, the default suite and how ``--scenario``
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
