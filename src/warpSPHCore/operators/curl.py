"""Placeholder: being written (issue 4)."""

CURL_SPEC = None
