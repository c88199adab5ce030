"""The report's colours: one palette for the figures (matplotlib) and the record explorer (CSS), chosen to stay
apart for readers with a colour-vision deficiency.

:data:`CATEGORICAL` is Okabe & Ito's palette ("Color Universal Design", 2008), which they built so that
protanopes, deuteranopes and tritanopes tell its colours apart; :func:`simulate` (Machado, Oliveira & Fernandes
2009, severity 1) and :func:`delta_e` (CIE76) let a test check it: every pair stays apart under each
deficiency (tests/test_report.py). Outcome colours are named (:data:`OUTCOME`), so ok / failed are never told
apart by red and green alone: the bars are labelled too. The agreement page's confusion heatmap writes each
count in black or white, whichever contrasts more with its cell (:func:`ink`, WCAG 2's ratio). Pure Python.
"""

from __future__ import annotations

from typing import Literal

#: Okabe–Ito, in the order figures use them (black last: for text and lines).
CATEGORICAL: tuple[str, ...] = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
)
#: A record's outcome.
OUTCOME: dict[str, str] = {"ok": "#009E73", "partial": "#E69F00", "failed": "#D55E00", "skipped": "#999999"}
#: Agreement with people: agree, disagree.
AGREE, DISAGREE = "#0072B2", "#D55E00"

Deficiency = Literal["protanopia", "deuteranopia", "tritanopia"]

# Machado et al. (2009), severity 1.0, on linear RGB.
_MACHADO: dict[str, tuple[tuple[float, float, float], ...]] = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}


def _linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _srgb(c: float) -> float:
    c = min(1.0, max(0.0, c))
    return 12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055


def rgb(colour: str) -> tuple[float, float, float]:
    """``#rrggbb`` as sRGB in [0, 1]."""
    h = colour.lstrip("#")
    return int(h[0:2], 16) / 255, int(h[2:4], 16) / 255, int(h[4:6], 16) / 255


def simulate(colour: str, deficiency: Deficiency) -> tuple[float, float, float]:
    """How ``colour`` looks to a reader with ``deficiency`` (sRGB in [0, 1])."""
    lin = [_linear(c) for c in rgb(colour)]
    m = _MACHADO[deficiency]
    out = [sum(m[i][k] * lin[k] for k in range(3)) for i in range(3)]
    r, g, b = (_srgb(c) for c in out)
    return r, g, b


def lab(srgb: tuple[float, float, float]) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB colour."""
    r, g, b = (_linear(c) for c in srgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def delta_e(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """CIE76 colour difference of two sRGB colours (about 2.3: just noticeable; > 10: clearly apart)."""
    la, lb = lab(a), lab(b)
    return float(sum((x - y) ** 2 for x, y in zip(la, lb, strict=True)) ** 0.5)


#: The confusion heatmap's scale: no item (white) to the most items (a dark blue of the same hue as CATEGORICAL's).
HEAT_LOW, HEAT_HIGH = "#ffffff", "#08306b"
#: The two text colours a cell is written in: whichever stands out more from its background.
INK_DARK, INK_LIGHT = "#000000", "#ffffff"


def mix(low: str, high: str, t: float) -> str:
    """The colour ``t`` (0–1) of the way from ``low`` to ``high`` (sRGB, linear in each channel), as ``#rrggbb``."""
    t = min(1.0, max(0.0, t))
    channels = (round(255 * (a + (b - a) * t)) for a, b in zip(rgb(low), rgb(high), strict=True))
    return "#" + "".join(f"{c:02x}" for c in channels)


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb``."""
    r, g, b = (_linear(c) for c in rgb(colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two colours (1–21; text needs 4.5)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def ink(background: str) -> str:
    """The text colour for ``background``: black or white, whichever contrasts more (always ≥ 4.58: the
    lesser of the two best cases, at the background where both are equal)."""
    return max((INK_DARK, INK_LIGHT), key=lambda c: contrast(c, background))
