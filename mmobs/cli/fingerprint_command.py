"""``mmobs fingerprint``: this install's fleet fingerprint; two hosts that print different ones key some image differently."""

from __future__ import annotations

import argparse
import json


def run_fingerprint(args: argparse.Namespace) -> int:
    """Print the digest and the reference key behind it, input by input."""
    from mmobs.observability.fingerprint import compute_fingerprint

    fingerprint = compute_fingerprint(args.vllm_version, args.front_end)
    if args.json:
        document = {"fingerprint": fingerprint.digest, "key_format": fingerprint.key_format, "keys": fingerprint.keys}
        print(json.dumps(document, indent=2))
    else:
        print(fingerprint.digest)
        print(f"  {'key format':28} {fingerprint.key_format}")
        for name, key in sorted(fingerprint.keys.items()):
            print(f"  {name:28} {key}")
    return 0
