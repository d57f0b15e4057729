"""The folders an export worker imports the package from, kept where build isolation strips them.

pip's isolated build environment starts every process with a ``sitecustomize`` that runs the
target environment's ``.pth`` files and then removes from ``sys.path`` each folder they add,
wherever the folder came from, ``PYTHONPATH`` included. An editable install writes such a
``.pth`` naming the project's source folder (hatchling's ``_editable_impl_<name>.pth``,
setuptools' ``__editable__.<name>.pth``), so the next ``pip install -e .`` started workers whose
``PYTHONPATH`` named the folder but whose ``sys.path`` lacked it: ``No module named <package>``.

So the orchestrator names the folders a second time, in ``SEARCH_PATH_ENV``, which no site hook
reads, and every worker calls ``restore_search_path`` before it imports the package: the
folders are on its ``sys.path`` whatever the target environment's ``.pth`` files name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

#: The workers' search path (``os.pathsep``-joined absolute folders). Not a user setting: the
#: orchestrator writes it into the environment of the workers it starts.
SEARCH_PATH_ENV = "JAXEXPORT_WORKER_SEARCH_PATH"


def search_path_value(search_path: Sequence[str]) -> str:
    """``SEARCH_PATH_ENV``'s value for these (absolute) folders."""
    return os.pathsep.join(search_path)


def restore_search_path(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Put back at the front of ``sys.path`` the folders of ``SEARCH_PATH_ENV`` it lacks (in
    their order, ahead of the build environment's site folders, as ``PYTHONPATH`` puts them);
    returns those put back. Folders still there keep their place."""
    wanted = [path for path in environ.get(SEARCH_PATH_ENV, "").split(os.pathsep) if path]
    missing = [path for path in dict.fromkeys(wanted) if path not in sys.path]
    sys.path[:0] = missing
    return missing


__all__ = ["SEARCH_PATH_ENV", "restore_search_path", "search_path_value"]
