"""Which image formats the loader opens by default, and why the others are refused.

vLLM 0.33 opens 37 of Pillow's formats (its ``ALLOWED_IMAGE_FORMATS``: every
in-process raster reader but EPS, WMF and the stub drivers). mmobs opens the
formats clients send to vision models, whose cost the structural checks
(:mod:`mmobs.keys.guard`) bound before Pillow decodes. Every other format vLLM
opens is refused by default, for one of the reasons below; a caller who needs
one passes ``formats=`` (or ``formats=None`` for all) to ``ImageMediaIO``, or
``--image-formats`` to ``mmobs serve``. A format refused here is answered
``unidentified`` with the list of accepted formats: a router then refuses an
image that vLLM would accept, never the other way round.
"""

from __future__ import annotations

#: Formats the loader opens by default. (JPEG covers MPO; AVIF is used where
#: this Pillow has the plugin.)
DEFAULT_FORMATS: tuple[str, ...] = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "AVIF")

_PYTHON_DECODER = "Pillow decodes it in pure Python: seconds to minutes of CPU at the pixel limit"
_CONTAINER = "it embeds other formats (PNG, JPEG, JPEG 2000) that would bypass their structural checks"
_RARE = "a rarely exercised decoder that no client sends to a vision model; opt in if you need it"

#: Formats vLLM 0.33 opens that mmobs refuses by default, with the reason.
REFUSED_BY_DEFAULT: dict[str, str] = {
    "BLP": _CONTAINER,
    "CUR": _CONTAINER,
    "DCX": _RARE,
    "DDS": _RARE,
    "DIB": "BMP without its file header: the same decoders, reached without BMP's structural checks",
    "FITS": "gzip-compressed FITS: " + _PYTHON_DECODER,
    "FLI": "an animation decoded frame by frame with no frame-count bound",
    "FTEX": _RARE,
    "GBR": _RARE,
    "ICNS": _CONTAINER,
    "ICO": _CONTAINER,
    "IM": _RARE,
    "IMT": _RARE,
    "IPTC": _RARE,
    "JPEG2000": "OpenJPEG's tile and resolution structure can cost far more than the pixel count suggests",
    "MCIDAS": _RARE,
    "MSP": _RARE,
    "PCD": _RARE,
    "PCX": _RARE,
    "PIXAR": _RARE,
    "PPM": "plain (ASCII) PNM: " + _PYTHON_DECODER,
    "PSD": "layers are decoded one by one, each up to the image size",
    "QOI": _PYTHON_DECODER,
    "SGI": _RARE,
    "SPIDER": _RARE,
    "SUN": _RARE,
    "TGA": _RARE,
    "XBM": _PYTHON_DECODER,
    "XPM": _PYTHON_DECODER,
    "XVTHUMB": _RARE,
}

#: vLLM 0.33's ``ALLOWED_IMAGE_FORMATS``, in its order: Pillow tries formats in
#: the order given, so a file that two plugins accept (a polyglot) is the
#: first one's. The loader identifies every file in this order, as vLLM does,
#: and only then refuses a format it does not open, so that it never keys as
#: a PNG what vLLM would open as something else.
VLLM_FORMATS: tuple[str, ...] = tuple(sorted((*DEFAULT_FORMATS, *REFUSED_BY_DEFAULT)))
