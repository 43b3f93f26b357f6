"""A first-seen JPEG's header record describes exactly what vLLM's own loader returns for it (vLLM in process).

A keys-only render hands vLLM, for a first-seen JPEG, a stand-in made from the header
(:mod:`mmobs.vllm.render.header_images`). Here every golden and corpus image (and JPEGs turned by
their EXIF orientation, in every mode Pillow's JPEG plugin opens) goes through vLLM's real
``ImageMediaIO.load_bytes``, and, wherever the header path gives a record, the record must say what the
decode gave: the Pillow class, mode, size (turned), format, ``io_config`` (which goes into the key) and
what vLLM's EXIF ImageID read finds (vLLM's own ``_get_image_id_bytes`` on the decoded image, and what
Pillow raises inside it, read on a twin decoded alike: Pillow's EXIF state is per object); and where
vLLM's loader refuses the bytes, the header path must give no record (the decode then refuses it, in
vLLM's words).
"""

from __future__ import annotations

import io
import warnings

from PIL import Image

from mmobs.vllm.render.header_images import HeaderImages
from tests.support import require_vllm
from tests.vllm.render_requests import every_image


def turned_jpegs() -> list[tuple[str, bytes]]:
    found = []
    for mode in ("RGB", "L", "CMYK"):
        for orientation in range(10):
            exif = Image.Exif()
            if orientation:
                exif[0x0112] = orientation
            buffer = io.BytesIO()
            Image.new(mode, (7, 3)).save(buffer, "JPEG", exif=exif.tobytes())
            found.append((f"{mode}-{orientation}.jpg", buffer.getvalue()))
    return found


def _raised_reading_image_id(image: Image.Image) -> Exception | None:
    """What Pillow raises where vLLM's tolerant read looks (``getexif().get(ImageID)``), or None."""
    try:
        image.getexif().get(Image.ExifTags.Base.ImageID)
    except Exception as error:  # what vLLM swallows, whatever it is
        return error
    return None


def test_every_header_record_is_what_vllms_loader_returns() -> None:
    require_vllm()
    import vllm.multimodal.hasher as vllm_hasher
    import vllm.multimodal.media.image as vllm_image

    header_images = HeaderImages(vllm_image.open_image)
    recorded = 0
    for name, data in [*every_image(), *turned_jpegs()]:
        loader = vllm_image.ImageMediaIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = header_images.record(loader, data)
            try:
                loaded = loader.load_bytes(data)
            except Exception:  # a ValueError (a 400), or what vLLM lets escape (a bomb's)
                assert record is None, name  # vLLM refuses it: the header path must leave it to the decode
                continue
        if record is None:
            continue
        media = loaded.media
        assert record.image_class.stands_for is type(media), name
        assert (record.mode, record.size, record.format) == (media.mode, media.size, media.format), name
        assert record.io_config == loaded.io_config, name
        (found, error) = record.image_id_reads[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            twin = vllm_image.ImageMediaIO().load_bytes(data).media
            assert found == vllm_hasher._get_image_id_bytes(media), name
            assert type(error) is type(_raised_reading_image_id(twin)), name
        recorded += 1
    assert recorded >= 40, recorded
