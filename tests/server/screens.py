"""Screenshots compared with committed references, tolerant of font antialiasing, strict about layout.

Both images are reduced to grey and shrunk SCALE times by averaging (the references are stored that small, which
keeps the repository small and smooths away antialiasing and subpixel differences between font renderers); a
pixel differs when its grey level moves by more than LEVEL out of 255, and a screen matches when at most
MAX_DIFFERING of its pixels differ, at the best of the shifts by up to SHIFT reduced pixels each way (a whole
screen a few pixels lower is a font's line height, not a layout change). A moved column, a cut-off button or a
taller row moves blocks of text against each other and changes far more than that. Measured on this page:
another glyph positioning (`--disable-font-subpixel-positioning`) differs by under 2 %, the page before this
layout by over 10 %.

Set DATAHUNT_REFRESH_SCREENSHOTS=1 to write the references anew instead of comparing (then look at them and
commit them); on a mismatch the test saves the screenshot, the reference and a difference image under
tests/artifacts/ to look at.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from PIL import Image, ImageChops

SCALE = 4
LEVEL = 48
MAX_DIFFERING = 0.03
SHIFT = 1  # reduced pixels (SCALE screen pixels) the comparison may move one image against the other
REFRESH_VARIABLE = "DATAHUNT_REFRESH_SCREENSHOTS"
# Read when the tests are collected: the suite's fixtures clear every DATAHUNT_* variable before each test.
REFRESH = os.environ.get(REFRESH_VARIABLE) == "1"


def reduced(png: bytes) -> Image.Image:
    """Return the screenshot as a grey image SCALE times smaller (box-averaged)."""
    image = Image.open(io.BytesIO(png)).convert("L")
    return image.resize((image.width // SCALE, image.height // SCALE), Image.Resampling.BOX)


def differing_share(actual: Image.Image, reference: Image.Image) -> float:
    """Return the share of pixels whose grey level differs by more than LEVEL (1.0 when the sizes differ), at the
    best of the small shifts SHIFT: a font whose lines sit a few pixels lower moves everything a little."""
    if actual.size != reference.size:
        return 1.0
    width, height = actual.size
    best = 1.0
    for dx in range(-SHIFT, SHIFT + 1):
        for dy in range(-SHIFT, SHIFT + 1):
            box = (max(0, dx), max(0, dy), width + min(0, dx), height + min(0, dy))
            moved = actual.crop(box)
            fixed = reference.crop((box[0] - dx, box[1] - dy, box[2] - dx, box[3] - dy))
            diff = ImageChops.difference(moved, fixed).point(lambda v: 255 if v > LEVEL else 0)
            best = min(best, diff.histogram()[255] / (moved.width * moved.height))
    return best


def assert_matches(png: bytes, reference_path: Path, artifacts: Path) -> float:
    """Compare a screenshot with its reference (or write the reference when refreshing); return the share of
    differing pixels. On a mismatch save what was seen under `artifacts` and fail saying so."""
    actual = reduced(png)
    if REFRESH:
        reference_path.parent.mkdir(parents=True, exist_ok=True)
        actual.save(reference_path, optimize=True)
        return 0.0
    assert reference_path.exists(), f"no reference {reference_path.name}: run with {REFRESH_VARIABLE}=1 to write it"
    reference = Image.open(reference_path).convert("L")
    share = differing_share(actual, reference)
    if share > MAX_DIFFERING:
        artifacts.mkdir(parents=True, exist_ok=True)
        stem = reference_path.stem
        actual.save(artifacts / f"{stem}.actual.png")
        reference.save(artifacts / f"{stem}.reference.png")
        if actual.size == reference.size:
            ImageChops.difference(actual, reference).save(artifacts / f"{stem}.diff.png")
    assert share <= MAX_DIFFERING, (
        f"{reference_path.name}: {share:.1%} of the pixels differ (at most {MAX_DIFFERING:.0%}); see "
        f"{artifacts}, and if the change is meant, refresh the references with {REFRESH_VARIABLE}=1")
    return share
