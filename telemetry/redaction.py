"""Credential-shaped text, redacted wherever the harness writes what a user gave it: run.json's command line,
recipe and error, the recorded environment, and every `error:` line (a launcher keeps stderr in a file).
A top-level module: the capture room and telemetry.errors both use it."""
from __future__ import annotations

import re

# Names that hold secrets, matched anywhere in the name (so *_CREDS, *_APIKEY, X_AUTHORIZATION are caught).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSPHRASE|(^|_)PWD($|_)|KEY|CRED|AUTH|COOKIE|SESSION|PRIVATE|"
                         r"SIGNATURE|SALT", re.I)
# Values that look like credentials whatever their name: URLs with a password, bearer/basic authorization,
# vendor token shapes (Hugging Face, GitHub, GitLab, Slack, OpenAI-style, AWS access keys, npm, PyPI),
# JSON web tokens and PEM private keys.
SECRET_VALUE = re.compile(
    r"://[^/\s:@]+:[^/\s@]+@"
    # (a tail in capitals and underscores only is a variable's name, HF_HUB_OFFLINE, not a token)
    # Hugging Face, GitHub and npm tokens are one run of letters and digits after the prefix (hf_ + 34): a tail
    # with '-' or '_' in it is a name, hf-internal-testing/..., /data/hf_datasets/, not a token
    r"|\b(hf|ghp|gho|ghu|ghs|ghr|npm)[_-](?=(?-i:[A-Za-z0-9]*[a-z0-9]))[A-Za-z0-9]{16,}"
    r"|\bpypi-(?-i:AgE)[A-Za-z0-9_-]{16,}"  # (a macaroon: base64 from 'AgE'; /srv/pypi-mirror-packages is a name)
    r"|\b(?-i:(AKIA|ASIA)[0-9A-Z]{16})\b"  # (capitals only, as AWS writes them: /data/asiapacificsalesdata is a name)
    r"|\bBearer\s+\S+"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----", re.I)
# GitHub fine-grained, GitLab, OpenAI/Anthropic-style and Slack tokens: 20 or more characters after the prefix, in
# which '-' and '_' may stand. The run is taken whole and judged in code (_is_token): a look-ahead inside the
# pattern scanned the rest of the run again from every '-' ("SK-SK-SK-...": time quadratic in the run)
TOKEN_RUN = re.compile(r"\b(github_pat|glpat|sk|xox[abpors])[_-][A-Za-z0-9_-]{20,}", re.I)
# an 'sk-' key is random text: 48 letters and digits, or base64url whose runs between '-' and '_' are long; words
# joined by '-' after it are a name (/data/sk-learn-models-checkpoints, sk-image-classification-baseline)
_KEY_RUN = re.compile(r"[A-Za-z0-9]{16}")
# Basic authorization is base64 of "user:password": redacted when the word after "Basic" decodes to that shape,
# so prose ("basic lora", "Basic settings") is left as it is
BASIC = re.compile(r"\bBasic\s+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])", re.I)
REDACTED = "<redacted>"
# A URL's query parameter whose name holds a secret (?token=..., &api_key=..., S3's X-Amz-Signature=...): the
# value is redacted, the name kept (it says what was there)
QUERY_SECRET = re.compile(r"([?&;](?:[A-Za-z0-9]*[_.-])*(?:token|secret|passw(?:or)?d?|pwd|apikey|key|sig|signature|auth|"
                          r"credentials?)(?:[_.-][A-Za-z0-9_.-]*)?=)[^&;#\s'\"]+", re.I)
# Fabric settings whose names hold KEY but no secret: an InfiniBand partition key (NCCL_IB_PKEY, UCX_IB_PKEY)
# is the fabric's partition, which a fabric report must show
NOT_SECRET_NAME = re.compile(r"(^|_)PKEY$", re.I)


def is_secret(name: str, value: str) -> bool:
    by_name = SECRET_NAME.search(name) and not NOT_SECRET_NAME.search(name)
    return bool(by_name or SECRET_VALUE.search(value) or QUERY_SECRET.search(value)
                or any(_is_token(m) for m in TOKEN_RUN.finditer(value))
                or any(_is_basic(m) for m in BASIC.finditer(value)))


def _is_token(match: re.Match) -> bool:
    """A TOKEN_RUN candidate is a token unless its tail is capitals and '_' only (a variable's name) or, after
    'sk', words joined by '-' or '_' (a name)."""
    tail = match.group(0)[len(match.group(1)) + 1:]
    if not re.search(r"[a-z0-9]", tail):
        return False
    return match.group(1).lower() != "sk" or _KEY_RUN.search(tail) is not None


def _is_basic(match: re.Match) -> bool:
    import base64
    import binascii

    word = match.group(1)
    try:
        decoded = base64.b64decode(word + "=" * (-len(word) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii() and decoded.decode("ascii").isprintable()


URL_USERINFO = re.compile(r"://[^/\s:@]+:[^/\s@]+@")  # a URL's user:password@, as SECRET_VALUE's first shape


def redact_text(text: str) -> str:
    """`text` with every credential-shaped part replaced (command lines, overrides, recipe strings); a URL keeps
    its scheme and host around the redacted user:password (https://<redacted>@hub/m, not https<redacted>hub/m)."""
    text = URL_USERINFO.sub("://" + REDACTED + "@", text)
    text = SECRET_VALUE.sub(REDACTED, text)
    text = QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    text = TOKEN_RUN.sub(lambda m: REDACTED if _is_token(m) else m.group(0), text)
    return BASIC.sub(lambda m: REDACTED if _is_basic(m) else m.group(0), text)


