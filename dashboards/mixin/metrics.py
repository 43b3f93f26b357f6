"""Every metric name the mixin's queries read, in one place.

mmobs's own names must equal :data:`mmobs.observability.metrics.METRIC_NAMES` (a test checks
it); the vLLM names are checked against vLLM's source by
``tests/vllm/test_vllm_metrics.py``. Counters carry their ``_total`` suffix, as on
the wire.
"""

from __future__ import annotations

# -- mmobs (mmobs/observability/metrics.py) -------------------------------------------------
EXIF_FALLBACKS = "mmobs_exif_fallback_total"
TRANSPOSE_FAILURES = "mmobs_exif_transpose_failures_total"
MEDIA_KEYS = "mmobs_media_keys_total"
HASH_DURATION = "mmobs_hash_duration_seconds"
HASHED_BYTES = "mmobs_hashed_bytes_total"
BAD_IMAGES = "mmobs_bad_images_total"
DRIFT = "mmobs_cache_key_drift_total"
DRIFT_SAMPLES = "mmobs_cache_key_drift_samples_total"
HASHER_INFO = "mmobs_hasher_info"
HTTP_REQUESTS = "mmobs_http_requests_total"
HTTP_REQUEST_DURATION = "mmobs_http_request_duration_seconds"
HTTP_IMAGE_REQUESTS = "mmobs_http_image_requests_total"
HTTP_FALLBACK_REQUESTS = "mmobs_http_exif_fallback_requests_total"
KEY_PATHS = "mmobs_key_paths_total"
EXIF_CORRUPT_WARNINGS = "mmobs_exif_corrupt_warnings_total"
HTTP_TTFB = "mmobs_http_time_to_first_byte_seconds"
HTTP_IN_PROGRESS = "mmobs_http_requests_in_progress"
HTTP_REQUEST_SIZE = "mmobs_http_request_size_bytes"
HTTP_RESPONSE_SIZE = "mmobs_http_response_size_bytes"

MMOBS_METRICS: frozenset[str] = frozenset(
    {
        EXIF_FALLBACKS,
        TRANSPOSE_FAILURES,
        MEDIA_KEYS,
        HASH_DURATION,
        HASHED_BYTES,
        BAD_IMAGES,
        DRIFT,
        DRIFT_SAMPLES,
        HASHER_INFO,
        HTTP_REQUESTS,
        HTTP_REQUEST_DURATION,
        HTTP_IMAGE_REQUESTS,
        HTTP_FALLBACK_REQUESTS,
        KEY_PATHS,
        EXIF_CORRUPT_WARNINGS,
        HTTP_TTFB,
        HTTP_IN_PROGRESS,
        HTTP_REQUEST_SIZE,
        HTTP_RESPONSE_SIZE,
    }
)

# -- mmobs inside vLLM's API server (mmobs/vllm/cache_drift/cache_metrics.py) -------------------------
#: Items the engine did not hold though the API server sent them by hash; items the API server's own
#: sender cache lost within a request; drifted items whose hash drifted recently before; requests
#: failed by drift, by outcome (healed, failed); items rolled back out of the sender cache.
VLLM_CACHE_DRIFT_ITEMS = "mmobs_vllm_mm_cache_drift_items_total"
VLLM_CACHE_SENDER_MISSES = "mmobs_vllm_mm_cache_sender_misses_total"
VLLM_CACHE_REDRIFTS = "mmobs_vllm_mm_cache_redrifts_total"
VLLM_CACHE_SENDER_REDRIFTS = "mmobs_vllm_mm_cache_sender_redrifts_total"
VLLM_CACHE_DRIFT_REQUESTS = "mmobs_vllm_mm_cache_drift_requests_total"
VLLM_CACHE_ROLLED_BACK = "mmobs_vllm_mm_cache_rolled_back_items_total"

VLLM_CACHE_DRIFT_METRICS: frozenset[str] = frozenset(
    {
        VLLM_CACHE_DRIFT_ITEMS,
        VLLM_CACHE_SENDER_MISSES,
        VLLM_CACHE_REDRIFTS,
        VLLM_CACHE_SENDER_REDRIFTS,
        VLLM_CACHE_DRIFT_REQUESTS,
        VLLM_CACHE_ROLLED_BACK,
    }
)

# -- mmobs inside vLLM's API server (mmobs/vllm/decode_free_hits/decode_metrics.py) ------------------------
#: Images not decoded again on a processor-cache hit, and the CPU seconds their first decode took;
#: skipped decodes done after all (something read the pixels), and their CPU seconds.
VLLM_SKIPPED_DECODES = "mmobs_vllm_skipped_decodes_total"
VLLM_SKIPPED_DECODE_CPU = "mmobs_vllm_skipped_decode_cpu_seconds_total"
VLLM_LATE_DECODES = "mmobs_vllm_late_decodes_total"
VLLM_LATE_DECODE_CPU = "mmobs_vllm_late_decode_cpu_seconds_total"
VLLM_DECODED_INDEX_ENTRIES = "mmobs_vllm_decoded_index_entries"
VLLM_DECODED_INDEX_BYTES = "mmobs_vllm_decoded_index_bytes"

VLLM_DECODE_SKIP_METRICS: frozenset[str] = frozenset(
    {
        VLLM_SKIPPED_DECODES,
        VLLM_SKIPPED_DECODE_CPU,
        VLLM_LATE_DECODES,
        VLLM_LATE_DECODE_CPU,
        VLLM_DECODED_INDEX_ENTRIES,
        VLLM_DECODED_INDEX_BYTES,
    }
)

# -- mmobs inside vLLM's API server (mmobs/vllm/uuid_checks/uuid_metrics.py) --------------------------
#: Items that came with a client uuid (checked against their content, or sent by uuid alone), and the
#: uuids vLLM would key as an earlier item's with other content (refused or counted); the index's size.
VLLM_UUID_ITEMS = "mmobs_vllm_mm_uuid_items_total"
VLLM_UUID_CONFLICTS = "mmobs_vllm_mm_uuid_conflicts_total"
VLLM_UUID_INDEX_ENTRIES = "mmobs_vllm_mm_uuid_index_entries"
VLLM_UUID_INDEX_BYTES = "mmobs_vllm_mm_uuid_index_bytes"

VLLM_UUID_CHECK_METRICS: frozenset[str] = frozenset(
    {VLLM_UUID_ITEMS, VLLM_UUID_CONFLICTS, VLLM_UUID_INDEX_ENTRIES, VLLM_UUID_INDEX_BYTES}
)

# -- mmobs inside vLLM's API server (mmobs/vllm/front_end/front_end_metrics.py) ---------------------
#: The multimodal front end's stages: downloads (seconds and bytes), data URLs' base64, image and video
#: decodes (and a decoded clip's frames read and kept), the HF processor on a request's misses (seconds and
#: items), and the whole front end.
VLLM_MEDIA_DOWNLOAD = "mmobs_vllm_mm_media_download_seconds"
VLLM_MEDIA_DOWNLOAD_SIZE = "mmobs_vllm_mm_media_download_bytes"
VLLM_BASE64_DECODE = "mmobs_vllm_mm_base64_decode_seconds"
VLLM_DECODE = "mmobs_vllm_mm_decode_seconds"
VLLM_VIDEO_FRAMES = "mmobs_vllm_mm_video_frames"
VLLM_PROCESSOR = "mmobs_vllm_mm_processor_seconds"
VLLM_PROCESSOR_ITEMS = "mmobs_vllm_mm_processor_items"
VLLM_FRONT_END = "mmobs_vllm_mm_preprocessing_total_seconds"

VLLM_FRONT_END_METRICS: frozenset[str] = frozenset(
    {
        VLLM_MEDIA_DOWNLOAD,
        VLLM_MEDIA_DOWNLOAD_SIZE,
        VLLM_BASE64_DECODE,
        VLLM_DECODE,
        VLLM_VIDEO_FRAMES,
        VLLM_PROCESSOR,
        VLLM_PROCESSOR_ITEMS,
        VLLM_FRONT_END,
    }
)

# -- mmobs inside vLLM's API server (mmobs/vllm/video_budget.py) -----------------------------------------
#: Video clips refused before their decode, by the budget their header showed they would exceed.
VLLM_VIDEO_REFUSALS = "mmobs_vllm_video_refusals_total"

VLLM_VIDEO_BUDGET_METRICS: frozenset[str] = frozenset({VLLM_VIDEO_REFUSALS})

# -- mmobs inside vLLM's engine core, either front end (mmobs/vllm/engine_items/item_metrics.py) -----------
#: The front end that serves (python or rust), the items the engine core received by how their identifier
#: was made, the items re-sent with their tensors (and those bytes), and the index that tells them.
VLLM_FRONT_END_INFO = "mmobs_vllm_front_end_info"
VLLM_ENGINE_ITEMS = "mmobs_vllm_engine_mm_items_total"
VLLM_ENGINE_RESENT_ITEMS = "mmobs_vllm_engine_mm_resent_items_total"
VLLM_ENGINE_RESENT_BYTES = "mmobs_vllm_engine_mm_resent_bytes_total"
VLLM_ENGINE_INDEX_ENTRIES = "mmobs_vllm_engine_mm_index_entries"

VLLM_ENGINE_ITEM_METRICS: frozenset[str] = frozenset(
    {VLLM_FRONT_END_INFO, VLLM_ENGINE_ITEMS, VLLM_ENGINE_RESENT_ITEMS, VLLM_ENGINE_RESENT_BYTES,
     VLLM_ENGINE_INDEX_ENTRIES}
)  # fmt: skip

# -- mmobs on vLLM's render endpoints (mmobs/vllm/render/render_metrics.py) -------------------------------
#: Render requests by endpoint, the mode they were answered in and why; where keys-only images got their size;
#: the sizes remembered for items sent by uuid alone.
VLLM_RENDER_REQUESTS = "mmobs_vllm_render_requests_total"
VLLM_RENDER_IMAGES = "mmobs_vllm_render_images_total"
VLLM_RENDER_VIDEOS = "mmobs_vllm_render_videos_total"
VLLM_RENDER_INDEX_ENTRIES = "mmobs_vllm_render_index_entries"
VLLM_RENDER_INDEX_BYTES = "mmobs_vllm_render_index_bytes"

VLLM_RENDER_METRICS: frozenset[str] = frozenset(
    {VLLM_RENDER_REQUESTS, VLLM_RENDER_IMAGES, VLLM_RENDER_VIDEOS, VLLM_RENDER_INDEX_ENTRIES, VLLM_RENDER_INDEX_BYTES}
)

#: The metric the job/instance variables read their values from. Its children
#: are created up front, so it exists from the first scrape of any mmobs process.
VARIABLE_METRIC = MEDIA_KEYS

# -- vLLM 0.32 and 0.33 (vllm/v1/metrics/loggers.py, PrometheusStatLogger) ---
#: Multimodal items looked up in vLLM's processor cache, and the ones found there.
#: prometheus_client adds ``_total`` to a Counter's name on the wire; vLLM serves the text format, so
#: Prometheus stores the names with their colon (checked against a real server scraped by a real
#: Prometheus in tests/dashboards/test_prometheus.py).
VLLM_MM_CACHE_QUERIES = "vllm:mm_cache_queries_total"
VLLM_MM_CACHE_HITS = "vllm:mm_cache_hits_total"
#: The labels vLLM puts on every per-engine metric.
VLLM_LABELS: tuple[str, ...] = ("model_name", "engine")

#: Time to first token (a Histogram, seconds), counted from the arrival vLLM's renderer records.
VLLM_TTFT = "vllm:time_to_first_token_seconds"

VLLM_METRICS: frozenset[str] = frozenset({VLLM_MM_CACHE_QUERIES, VLLM_MM_CACHE_HITS, VLLM_TTFT})


# -- label values ---------------------------------------------------------------
#: Media kinds the EXIF ImageID read applies to (the fallback's denominator).
IMAGE_KINDS = 'kind=~"image|media_with_bytes"'
STATUS_5XX = 'status_class="5xx"'
