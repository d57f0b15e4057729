"""The GPU page's claims that a CPU machine can check: cuda artifacts built here are real ones."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import pytest
from conftest import ROOT

from hatch_jaxexport.formats.manifest import ARTIFACT_DIR, MANIFEST_NAME

PAGE = ROOT / "docs" / "gpu.md"


@pytest.fixture(scope="module")
def cuda_records(demo_site: Path) -> list[tuple[dict, bytes]]:
    """Each cuda artifact of the baked ``jxe_demo`` with its blob."""
    folder = demo_site / "jxe_demo" / ARTIFACT_DIR
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    return [(record, (folder / record["file"]).read_bytes())
            for record in manifest["artifacts"] if record["platform"] == "cuda"]


def test_the_build_exports_cuda_artifacts_on_a_machine_without_a_gpu(cuda_records):
    assert jax.default_backend() == "cpu"
    assert cuda_records, "jxe_demo names platforms=['cuda'] for gpu_only"
    assert {record["function"] for record, _ in cuda_records} >= {"jxe_demo.funcs:gpu_only"}


def test_a_cuda_artifact_deserializes_for_cuda_only_with_the_manifest_types(cuda_records):
    for record, blob in cuda_records:
        exported = jax.export.deserialize(bytearray(blob))
        assert exported.platforms == ("cuda",), record["id"]
        assert [str(a) for a in exported.in_avals] == record["in_avals"], record["id"]
        assert [str(a) for a in exported.out_avals] == record["out_avals"], record["id"]
        # and a CPU process cannot run it: jax itself refuses the platform
        zeros = [jax.numpy.zeros([d if isinstance(d, int) else 2 for d in aval.shape],
                                 aval.dtype) for aval in exported.in_avals]
        with pytest.raises(ValueError, match=r"exported for platforms '?\('cuda',\)"):
            jax.jit(exported.call)(*zeros)


def test_the_page_says_what_was_not_verified():
    text = PAGE.read_text()
    assert text.count("**not verified**") >= 3
    for test_file in ("tests/integration/test_hatch_hook.py", "tests/examples/test_gpu_page.py",
                      "tests/unit/runtime/call/test_loader.py"):
        assert test_file in text and (ROOT / test_file).exists()
