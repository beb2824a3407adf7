"""Cloud Storage's checks of a V4 signed URL and a V4 POST policy form, for the bucket proxy
(gcs_proxy.py says which pages each rule follows). `signed_request_problem` answers why a
request is refused (Cloud Storage's XML error code and message), or None when its signature,
its time and the signer's IAM permission allow it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime, timedelta, timezone
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from .iam_policy import Resource

ALGORITHM = "GOOG4-RSA-SHA256"
SCOPE_SUFFIX = "/auto/storage/goog4_request"
OBJECT_TYPE = "storage.googleapis.com/Object"
# Form fields a policy need not name
# (https://cloud.google.com/storage/docs/xml-api/post-object-forms#form_fields).
UNNAMED_FIELDS = {"file", "policy", "x-goog-signature"}


def xml_error(problem: tuple[str, str]) -> bytes:
    code, message = problem
    return (
        "<?xml version='1.0' encoding='UTF-8'?><Error>"
        f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error>"
    ).encode()


def _verified(public_key: Any, signature: bytes, signed: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    if public_key is None:
        return False
    try:
        public_key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def _signer(credential: str) -> str | None:
    email, _, scope = credential.partition("/")
    return email if scope.endswith(SCOPE_SUFFIX) and "@" in email else None


def _time(stamp: str) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _object(bucket: str, name: str) -> Resource:
    return Resource(OBJECT_TYPE, f"projects/_/buckets/{bucket}/objects/{name}")


def _may(proxy, email: str, bucket: str, name: str, verb: str) -> bool:
    member = f"serviceAccount:{email}"
    needs = {"GET": ["storage.objects.get"], "HEAD": ["storage.objects.get"]}.get(verb)
    if needs is None:  # an upload: create, and delete to replace
        needs = ["storage.objects.create"]
        if proxy.object_exists(bucket, name):
            needs.append("storage.objects.delete")
    return all(proxy.allowed(member, n, _object(bucket, name)) for n in needs)


DENIED = ("AccessDenied", "Access denied.")


def signed_request_problem(proxy, request) -> tuple[str, str] | None:
    if "X-Goog-Signature" in request.query:
        return _signed_url_problem(proxy, request)
    return _policy_form_problem(proxy, request)


def _signed_url_problem(proxy, request) -> tuple[str, str] | None:
    raw_query = urlsplit(request.path).query
    pairs = [(k, v) for k, v in parse_qsl(raw_query, keep_blank_values=True)]
    params = dict(pairs)
    email = _signer(params.get("X-Goog-Credential", ""))
    signed_at = _time(params.get("X-Goog-Date", ""))
    if params.get("X-Goog-Algorithm") != ALGORITHM or email is None or signed_at is None:
        return ("AuthenticationRequired", "Malformed signed URL.")
    canonical_query = "&".join(
        f"{quote(k, safe='~')}={quote(v, safe='~')}"
        for k, v in sorted(pairs)
        if k != "X-Goog-Signature"
    )
    signed_headers = params.get("X-Goog-SignedHeaders", "")
    headers = "".join(
        f"{name}:{(request.headers.get(name) or '').strip()}\n"
        for name in signed_headers.split(";")
    )
    canonical = "\n".join(
        [
            request.command,
            request.url_path,
            canonical_query,
            headers,
            signed_headers,
            "UNSIGNED-PAYLOAD",
        ]
    )
    scope = params["X-Goog-Credential"].partition("/")[2]
    string_to_sign = "\n".join(
        [ALGORITHM, params["X-Goog-Date"], scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    try:
        signature = binascii.unhexlify(params["X-Goog-Signature"])
    except (binascii.Error, ValueError):
        signature = b""
    if not _verified(proxy.public_key_of(email), signature, string_to_sign.encode()):
        return (
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )
    expires = signed_at + timedelta(seconds=int(params.get("X-Goog-Expires", "0") or 0))
    if datetime.now(timezone.utc) > expires:
        return ("ExpiredToken", "Invalid argument: the signed URL has expired.")
    bucket, _, name = request.url_path.lstrip("/").partition("/")
    if not _may(proxy, email, bucket, unquote(name), request.command):
        return DENIED
    return None


def _form_fields(request) -> tuple[dict[str, str], int] | None:
    """The form's text fields and the file's size; None when it is no multipart form."""
    content_type = request.headers.get("Content-Type") or ""
    if not content_type.startswith("multipart/form-data"):
        return None
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + request.raw_body)
    fields: dict[str, str] = {}
    size = -1
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        body = part.get_payload(decode=True) or b""
        if name == "file":
            size = len(body)
        elif name:
            fields[name] = body.decode("utf-8", "replace")
    return fields, size


def _condition_holds(condition: Any, fields: dict[str, str], size: int) -> tuple[bool, str]:
    """Whether one policy condition holds for the form, and the field(s) it names."""
    if isinstance(condition, dict) and len(condition) == 1:
        ((name, value),) = condition.items()
        return fields.get(name) == value, name
    if isinstance(condition, list) and len(condition) == 3:
        operator, subject, value = condition
        if operator == "content-length-range":
            return int(subject) <= size <= int(value), ""
        name = str(subject).removeprefix("$")
        if operator == "starts-with":
            return name in fields and fields[name].startswith(str(value)), name
        if operator == "eq":
            return fields.get(name) == value, name
    return False, ""


def _policy_form_problem(proxy, request) -> tuple[str, str] | None:
    parsed = _form_fields(request)
    if parsed is None:
        return ("InvalidArgument", "A POST to a bucket is a multipart form upload.")
    fields, size = parsed
    fields.setdefault("bucket", request.url_path.strip("/"))
    email = _signer(fields.get("x-goog-credential", ""))
    try:
        signature = binascii.unhexlify(fields.get("x-goog-signature", ""))
        document = json.loads(base64.b64decode(fields.get("policy", ""), validate=True))
    except (binascii.Error, ValueError):
        return ("InvalidPolicyDocument", "The policy document is malformed.")
    if email is None or not _verified(
        proxy.public_key_of(email), signature, fields["policy"].encode()
    ):
        return (
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )
    try:
        expires = datetime.strptime(document["expiration"], "%Y-%m-%dT%H:%M:%SZ")
    except (KeyError, ValueError):
        return ("InvalidPolicyDocument", "The policy document has no valid expiration.")
    if datetime.now(timezone.utc) > expires.replace(tzinfo=timezone.utc):
        return ("InvalidPolicyDocument", "The policy document has expired.")
    named = set()
    for condition in document.get("conditions", []):
        holds, name = _condition_holds(condition, fields, size)
        named.add(name)
        if not holds:
            return (
                "InvalidPolicyDocument",
                "The content of the form does not meet the conditions specified in the "
                f"policy document: {json.dumps(condition)}",
            )
    unnamed = {
        f
        for f in fields
        if f not in named | UNNAMED_FIELDS | {"bucket"} and not f.startswith("x-ignore-")
    }
    if unnamed:
        return ("InvalidPolicyDocument", f"Form fields not in the policy: {sorted(unnamed)}")
    if "key" not in fields or not _may(proxy, email, fields["bucket"], fields["key"], "POST"):
        return DENIED
    return None
