"""The pieces of a built wheel's bake that run without an export: which packages a wheel ships,
and its ``METADATA`` given the jax requirement (``Requires-Dist`` as the backend wrote it)."""

from __future__ import annotations

from hatch_jaxexport.bake.wheel_bake import rewrite_metadata, wheel_packages

METADATA = ("Metadata-Version: 2.1\nName: mypkg\nVersion: 1.0\nRequires-Dist: numpy>=1.24\n"
            "Requires-Dist: {own}\nRequires-Dist: hatch-jaxexport\n\nA description.\n\nRequires"
            "-Dist: in the body stays\n")


class Lines:
    """A reporter that keeps each message, by kind."""

    skip_note = trace_note = ""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, kind: str):
        return lambda message: self.lines.append((kind, message))


def test_the_packages_a_wheel_ships_are_its_top_level_folders_with_an_init():
    names = ["mypkg/__init__.py", "mypkg/sub/__init__.py", "other/__init__.py", "lone.py",
             "ns/mod.py", "mypkg-1.0.dist-info/METADATA", "mypkg-1.0.data/purelib/x/__init__.py"]
    assert wheel_packages(names) == ["mypkg", "other"]


def test_the_jax_requirement_tightens_the_projects_own_line_in_place():
    reporter = Lines()
    text = rewrite_metadata(METADATA.format(own="jax>=0.5"), "jax>=0.10.2", reporter)
    assert text == METADATA.format(own="jax>=0.10.2")
    assert [kind for kind, _ in reporter.lines] == ["info"]


def test_a_requirement_the_project_lacks_is_added_after_its_others():
    text = rewrite_metadata(METADATA.format(own="scipy"), "jax>=0.10.2", Lines())
    head = text.partition("\n\n")[0].splitlines()
    assert head[-2:] == ["Requires-Dist: hatch-jaxexport", "Requires-Dist: jax>=0.10.2"]
    assert text.endswith("\n\nA description.\n\nRequires-Dist: in the body stays\n")


def test_no_requirement_leaves_the_metadata_byte_for_byte_and_a_missing_runtime_is_said():
    reporter = Lines()
    text = METADATA.format(own="jax").replace("Requires-Dist: hatch-jaxexport\n", "")
    assert rewrite_metadata(text, None, reporter) == text
    assert reporter.lines and reporter.lines[0][0] == "warning"
    assert "does not list hatch-jaxexport" in reporter.lines[0][1]
