"""One image of a request, and its encoded bytes: a data: URL decoded here, a remote URL fetched.

Remote URLs are the operator's decision (``--allow-remote-host``): without an
allowed host they are refused with a message that says how to send the image
instead. A data: URL a decode worker returned arrives as bytes, and its
payload, tens of megabytes, is decoded from them without a text copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmobs.errors import BadImageError
from mmobs.keys.data_url import decode_base64, parse_data_url
from mmobs.keys.refusals import report_bad_image
from mmobs.observability import tracing
from mmobs.service.fetch import RemoteFetcher


@dataclass
class RequestImage:
    """One image of a request: its ``param``, and a URL (text, or UTF-8 bytes from a worker) or raw bytes."""

    param: str
    url: str | bytes | None = None
    data: bytes | None = None


async def image_bytes(image: RequestImage, fetcher: RemoteFetcher | None, max_bytes: int) -> bytes:
    """The encoded bytes an image's URL names (``fetcher`` is ``None`` when no remote host is allowed)."""
    url = image.url if image.url is not None else ""
    try:
        scheme = (url[:8] if isinstance(url, str) else url[:8].decode("latin-1")).lower()
        if scheme.startswith(("http://", "https://")):
            if fetcher is None:
                raise BadImageError(
                    "unsupported_url",
                    "remote image URLs are off on this server (its operator can allow a host with "
                    "--allow-remote-host HOST); send the image as a data: URL",
                )
            with tracing.span("mmobs.media.download", {"mmobs.modality": "image", "url.scheme": scheme.split(":")[0]}):
                data = await fetcher.fetch(url if isinstance(url, str) else url.decode("utf-8", "surrogatepass"))
                tracing.set_attribute("mmobs.media.bytes", len(data))
                return data
        with tracing.span("mmobs.media.base64", {"mmobs.modality": "image"}):
            data = data_url_bytes(url, max_bytes)
            tracing.set_attribute("mmobs.media.bytes", len(data))
            return data
    except BadImageError as error:
        raise report_bad_image(error.with_param(image.param)) from None


def data_url_bytes(url: str | bytes, max_bytes: int) -> bytes:
    """Decode a data: URL, given as text or as the UTF-8 bytes a decode worker returned.

    For bytes, only the header (up to the first comma) becomes text: the payload,
    tens of megabytes, is decoded from the bytes it arrived as, without a text copy.
    """
    if isinstance(url, str):
        _, payload = parse_data_url(url)
        return decode_base64(payload, max_bytes)
    comma = url.find(b",", 0, 512)
    if comma < 0:  # no comma, or one past any header the parser accepts: let it say which
        tail = "," if b"," in url else ""
        parse_data_url(url[:300].decode("utf-8", "replace") + tail)
        raise AssertionError("parse_data_url accepted a data: URL without a comma")
    parse_data_url(url[: comma + 1].decode("utf-8", "surrogatepass"))
    encoded = url[comma + 1 :]
    if not encoded.isascii():  # what the text path says when it cannot encode the payload as ASCII
        raise BadImageError("bad_base64", "the base64 payload has non-ASCII characters")
    return decode_base64(encoded, max_bytes)
