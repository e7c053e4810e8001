"""Line markers for tests that check where an error points: a line of a test file ending in
`# <tag>` is the line a DSL error must name."""

import pathlib

import pytest

from argus.lang import DSLError


def line_marked(path: pathlib.Path, tag: str) -> int:
    """Line number of the one line of `path` ending in `# <tag>`."""
    lines = [n for n, text in enumerate(path.read_text().splitlines(), 1)
             if text.rstrip().endswith(f"# {tag}")]
    assert len(lines) == 1, (tag, lines)
    return lines[0]


def expect_misuse_at(path: pathlib.Path, kernel_def, tag: str, *fragments: str):
    """Tracing `kernel_def` raises a DSLError at the line of `path` marked `tag`, whose message
    starts with that place and contains every fragment."""
    with pytest.raises(DSLError) as caught:
        kernel_def.trace()
    error = caught.value
    assert error.loc.file.endswith(path.name) and error.loc.line == line_marked(path, tag), \
        str(error)
    assert str(error).startswith(f"{error.loc.file}:{error.loc.line}: ")
    for fragment in fragments:
        assert fragment in str(error), str(error)
