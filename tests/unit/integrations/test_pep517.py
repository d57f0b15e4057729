"""The wrapping PEP 517 backend's configuration: ``[tool.jaxexport] backend`` and the options
beside it, every problem with its TOML path."""

from __future__ import annotations

import pytest

from hatch_jaxexport.errors import ConfigError
from hatch_jaxexport.integrations.pep517 import project_sources, read_config


def write(tmp_path, table: str):
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'p'\n\n[tool.jaxexport]\n{table}")
    return tmp_path


def test_the_backend_and_the_hooks_options_come_from_one_table(tmp_path):
    backend, options = read_config(write(tmp_path, 'backend = "flit_core.buildapi"\njobs = 2\n'))
    assert backend == "flit_core.buildapi" and options.jobs == 2


def test_every_problem_is_listed_with_its_path(tmp_path):
    with pytest.raises(ConfigError) as err:
        read_config(write(tmp_path, 'backend = 3\njobs = "x"\nplatfroms = ["cpu"]\n'))
    text = str(err.value)
    assert "tool.jaxexport.backend must be a backend's import name" in text
    assert "tool.jaxexport.jobs" in text and "platfroms" in text


@pytest.mark.parametrize("backend", ["hatchling.build", "setuptools.build_meta"])
def test_backends_with_their_own_integration_are_sent_to_it(tmp_path, backend):
    with pytest.raises(ConfigError, match="has its own integration"):
        read_config(write(tmp_path, f'backend = "{backend}"\n'))


def test_a_project_without_the_table_has_no_backend_and_the_defaults(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    assert read_config(tmp_path) == (None, read_config(tmp_path)[1])
    assert read_config(tmp_path)[1].jobs == 1


def test_source_folders_are_found_flat_or_under_src(tmp_path):
    for folder in ("src/a", "b", "c"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "c" / "__init__.py").unlink()
    found = project_sources(read_config(write(tmp_path, ""))[1], tmp_path)
    assert found == {"a": tmp_path / "src" / "a", "b": tmp_path / "b"}
