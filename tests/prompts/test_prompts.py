"""Every prompt renders with exactly its placeholders; a missing or unused value fails."""

from __future__ import annotations

import pytest

from prompts import PromptFileError, placeholders, prompt_names, render_prompt


@pytest.mark.parametrize("name", prompt_names())
def test_every_prompt_renders(name: str) -> None:
    values = {key: f"<{key}>" for key in placeholders(name)}
    text = render_prompt(name, **values)
    for key in values:
        assert f"<{key}>" in text


def test_missing_and_unused_values_fail() -> None:
    names = [n for n in prompt_names() if placeholders(n)]
    assert names, "expected at least one prompt with placeholders"
    name = names[0]
    with pytest.raises(PromptFileError, match="missing"):
        render_prompt(name)
    values = dict.fromkeys(placeholders(name), "x")
    with pytest.raises(PromptFileError, match="unused"):
        render_prompt(name, not_a_placeholder="x", **values)
