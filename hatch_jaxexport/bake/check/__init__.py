"""The release check: do an installed distribution's artifacts match fresh exports of the source?

Part of the build layer; the pytest plugin (``hatch_jaxexport.integrations.pytest_plugin``) is a
thin adapter over it, and nothing in it imports pytest. Split by concern: ``_bundle`` (the
installed distribution's artifacts and the source being checked), ``_plan`` (pairing them into
cases), ``_outcome`` (the verdict on a case and its wording), ``_compare`` (the structural
comparison of one case) and ``_numerics`` (running both exports and comparing the numbers).
The names below are the facade the plugin and the tests use.
"""

from hatch_jaxexport.bake.check._bundle import SOURCE_HINT, find_bundle, put_source_first
from hatch_jaxexport.bake.check._compare import check_case, module_diff, without_diagnostics
from hatch_jaxexport.bake.check._numerics import compare_arrays, solve_shapes, tolerance
from hatch_jaxexport.bake.check._outcome import JAX_HINT, REBUILD_HINT, Outcome
from hatch_jaxexport.bake.check._plan import Plan, plan_check

__all__ = ["JAX_HINT", "Outcome", "Plan", "REBUILD_HINT", "SOURCE_HINT", "check_case",
           "compare_arrays", "find_bundle", "module_diff", "plan_check", "put_source_first",
           "solve_shapes", "tolerance", "without_diagnostics"]
