"""Whether something was drawn on an image, under every matplotlib.

mmengine's visualiser draws on a matplotlib canvas. With matplotlib 3.11 and
newer, a canvas with nothing drawn on it gives back the image itself. With
older releases (3.10.9 is the newest for Python 3.10) it does not: the canvas
is a hundredth of a pixel larger than the image (``Visualizer.set_image``
pads the figure by 0.01 against matplotlib's truncation) and the image is
resampled onto it, which moves pixels by up to one and blends some.
:func:`drawn_difference` measures what no pixel within one of the same place
in the image explains: 0 for an undrawn canvas under matplotlib 3.11, 3.6
under 3.10.9 (a demo detector's picture with nothing above its threshold),
56 with its boxes and masks drawn.
"""
from __future__ import annotations

import numpy as np

# The most drawn_difference an undrawn canvas shows (a JPEG's re-encoding and
# matplotlib < 3.11's resampling included; module docstring).
NOTHING_DRAWN = 5.0


def exact_canvas() -> bool:
    """matplotlib's canvas gives back an undrawn image exactly (3.11 and newer)."""
    import matplotlib
    from packaging.version import Version
    return Version(matplotlib.__version__).release[:2] >= (3, 11)


def drawn_difference(drawn: np.ndarray, image: np.ndarray) -> float:
    """The mean, over ``drawn``'s pixels, of the smallest absolute difference
    (averaged over channels) between the pixel and the pixels of ``image``
    within one pixel of its place. Both (H, W, C)."""
    drawn, image = np.asarray(drawn, np.int32), np.asarray(image, np.int32)
    if drawn.shape != image.shape:
        raise ValueError(f'the drawing is {drawn.shape}, the image {image.shape}')
    height, width = image.shape[:2]
    padded = np.pad(image, ((1, 1), (1, 1), (0, 0)), mode='edge')
    nearest = np.full((height, width), np.inf)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            shifted = padded[dy:dy + height, dx:dx + width]
            nearest = np.minimum(nearest, np.abs(drawn - shifted).mean(axis=-1))
    return float(nearest.mean())
