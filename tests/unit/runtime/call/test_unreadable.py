"""An artifact whose blob passes its hash but that this jax cannot read: found on the first
call (the same jax wrote it, so it is read lazily), it gives way to the source for good."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

SCRIPT = """
import json, logging
import numpy as np
records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("hatch_jaxexport").addHandler(handler)
from jxe_demo import funcs
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
x = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
first, second = np.asarray(funcs.scale(x)), np.asarray(funcs.scale(x + 1))
print(json.dumps({
    "equal": bool(np.allclose(first, np.sin(x) * 2, atol=1e-6)
                  and np.allclose(second, np.sin(x + 1) * 2, atol=1e-6)),
    "from_artifact": list(loaded_from_artifact(funcs.scale).values()),
    "warnings": [r.getMessage() for r in records if r.levelno >= logging.WARNING]}))
"""


def _damaged_copy(demo_site: Path, tmp_path: Path) -> Path:
    """``demo_site`` with ``scale``'s artifact replaced by bytes jax cannot read, rehashed."""
    site = tmp_path / "site"
    shutil.copytree(demo_site, site, ignore=shutil.ignore_patterns("__pycache__"))
    folder = site / "jxe_demo" / "_jaxexport"
    manifest = json.loads((folder / "manifest.json").read_text())
    for record in manifest["artifacts"]:
        if record["function"] == "jxe_demo.funcs:scale":
            data = b"not a jax.export flatbuffer" * 8
            (folder / record["file"]).write_bytes(data)
            record["sha256"], record["size"] = hashlib.sha256(data).hexdigest(), len(data)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return site


def test_an_unreadable_blob_gives_way_to_the_source_for_good(demo_site, tmp_path, run_python):
    site = _damaged_copy(demo_site, tmp_path)
    proc = run_python(SCRIPT, env={"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": "0",
                                   "HATCH_JAXEXPORT_TIERED": "0"})
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["equal"]  # the source's results, both calls
    assert out["from_artifact"] == [False]  # its key now resolves to the source
    # this very jax wrote it and cannot read it: a damaged install, told once at WARNING
    assert len(out["warnings"]) == 1 and "jxe_demo.funcs:scale" in out["warnings"][0]
