"""The vLLM releases mmobs keys for, and what each one's key depends on: written once, as data.

A fleet runs more than the newest vLLM, and a router keying for it must compute the key each replica
computes. vLLM's key changed five times between 0.25 and 0.33 (read from each release's
``vllm/multimodal/hasher.py`` and ``media/image.py``; ``tests/keys/test_releases.py`` holds every
release here to its own hasher and loader):

=========  ==================================================================================
format     what changed in the release that names it
=========  ==================================================================================
``0.25``   the oldest mmobs keys for: unframed (keys and values simply concatenated), the image's
           bytes alone, the algorithm read from ``VLLM_MM_HASHER_ALGORITHM``
``0.27``   the loader's conversion joins the key (``io_config``); video frames with their bytes
           are keyed by the smaller of the two; ``hash_kwargs(algorithm, /, **kwargs)``
``0.30``   frames as a torch tensor are keyed so too (before, they were pickled)
``0.31``   framed (vLLM PR #54283): every chunk preceded by its length, every value by its kind;
           the ImageID read tolerantly (vLLM PR #56576)
``0.33``   the loader composites an RGB image with a ``transparency`` (a PNG's ``tRNS``) onto the
           background too, so ``io_config`` joins its key; before, an image already in the
           target mode was kept as it was
=========  ==================================================================================

Every release from 0.31 on reads the EXIF ImageID tolerantly (vLLM PR #56576); before, a broken
EXIF block raised out of the hasher. mmobs always tolerates it, and reports it: its key for such an
image is the one the release's format gives without an ImageID (what the fix gives, in that format).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmobs.errors import InvalidOptionError

__all__ = ["NEWEST", "RELEASES", "KeyFormat", "key_format"]


@dataclass(frozen=True, slots=True)
class KeyFormat:
    """How a run of vLLM releases keys an item. ``name`` is the first release that keys so."""

    name: str
    #: Lengths before chunks and tags before values (0.31 on); else keys and values concatenated.
    framed: bool
    #: The loader's ``io_config`` joins an image's key when it converted the image (0.27 on).
    io_config: bool
    #: Media-with-bytes frame types keyed as ``video`` (the smaller of frames and file); others are pickled.
    video_frames: frozenset[str]
    #: The loader converts an RGB image with a ``transparency`` to RGB (0.33 on); before, only a new mode converted.
    composites_transparency: bool
    #: ``hash_kwargs(algorithm, /, **kwargs)`` (0.27 on); before, ``hash_kwargs(**kwargs)`` read the environment.
    algorithm_argument: bool
    #: The EXIF ImageID read tolerantly (0.31 on, vLLM PR #56576); before, a broken EXIF block raises out of the hasher.
    tolerant_image_id: bool

    def converts(self, target: str | None, mode: str, transparent: bool) -> bool:
        """Whether this format's loader makes a new image of one in ``mode`` (so ``io_config`` is set)."""
        if target is None:
            return False
        return (self.composites_transparency and target == "RGB" and transparent) or mode != target


_FRAMES = frozenset({"ndarray"})
_FORMATS = (
    KeyFormat("0.25", framed=False, io_config=False, video_frames=frozenset(), composites_transparency=False,
              algorithm_argument=False, tolerant_image_id=False),
    KeyFormat("0.27", framed=False, io_config=True, video_frames=_FRAMES, composites_transparency=False,
              algorithm_argument=True, tolerant_image_id=False),
    KeyFormat("0.30", framed=False, io_config=True, video_frames=_FRAMES | {"tensor"}, composites_transparency=False,
              algorithm_argument=True, tolerant_image_id=False),
    KeyFormat("0.31", framed=True, io_config=True, video_frames=_FRAMES | {"tensor"}, composites_transparency=False,
              algorithm_argument=True, tolerant_image_id=True),
    KeyFormat("0.33", framed=True, io_config=True, video_frames=_FRAMES | {"tensor"}, composites_transparency=True,
              algorithm_argument=True, tolerant_image_id=True),
)  # fmt: skip
_BY_NAME = {fmt.name: fmt for fmt in _FORMATS}

#: Every vLLM release mmobs keys for, and its format. A release missing here is refused, never guessed.
RELEASES: dict[str, KeyFormat] = {
    version: _BY_NAME[name]
    for version, name in (
        ("0.25.0", "0.25"), ("0.25.1", "0.25"), ("0.26.0", "0.25"),
        ("0.27.0", "0.27"), ("0.27.1", "0.27"), ("0.28.0", "0.27"), ("0.29.0", "0.27"),
        ("0.30.0", "0.30"),
        ("0.31.0", "0.31"), ("0.32.0", "0.31"),
        ("0.33.0", "0.33"), ("0.34.0", "0.33"),
    )
}  # fmt: skip
#: The release keyed when none is named.
NEWEST = "0.34.0"


def key_format(vllm_version: str | None = None) -> KeyFormat:
    """The format release ``vllm_version`` keys with (the newest for ``None``); a local suffix (``+cpu``) is ignored.

    Raises :class:`~mmobs.errors.InvalidOptionError` naming the known releases for any other.
    """
    if vllm_version is None:
        return RELEASES[NEWEST]
    fmt = RELEASES.get(str(vllm_version).partition("+")[0])
    if fmt is None:
        known = ", ".join(RELEASES)
        raise InvalidOptionError(
            "vllm_version", f"mmobs does not know how vLLM {vllm_version!r} keys images; known releases: {known}"
        )
    return fmt
