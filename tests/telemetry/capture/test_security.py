"""Secrets never reach a file (by name and by value shape, over a list); Markdown reports show user text as
text; run names with matplotlib math ("$...$") do not break compare."""
from __future__ import annotations

import subprocess
import sys

import pytest
from markdown_it import MarkdownIt

from telemetry.analysis.report import md_escape
from telemetry.capture.environment import REDACTED, redact_text, redact_tree, redacted_env

from ...conftest import REPO
from ..recorded import write_run

SECRET_NAMES = [
    "NCCL_TOKEN", "NCCL_API_TOKEN", "GLOO_SECRET", "NCCL_CLIENT_SECRET", "NCCL_PASSWORD", "NCCL_IB_PASSWD",
    "FI_PASSPHRASE", "NCCL_DB_PWD", "NCCL_API_KEY", "NCCL_APIKEY", "FI_EFA_KEY_ID", "NCCL_PRIVATE_KEY",
    "NCCL_CREDS", "FI_CREDS", "UCX_CREDENTIALS", "NCCL_CRED_FILE", "NCCL_AUTH", "NCCL_AUTHORIZATION",
    "GLOO_AUTH_HEADER", "NCCL_COOKIE", "NCCL_SESSION_ID", "NCCL_SIGNATURE", "NCCL_SALT", "NCCL_Mixed_Token",
]
# (value, under an innocent name) - shapes of real credentials
SECRET_VALUES = [
    "http://user:pw@proxy:3128", "https://alice:s3cr3t@git.example.com/repo.git",
    "hf_abcdefghijklmnopqrstuvwxyz", "ghp_0123456789abcdefghijABCDEFGHIJ", "github_pat_11ABCDEFG0123456789_xyz",
    "gho_abcdefghijklmnop", "glpat-abcdefghijklmnop1234", "xoxb-123456789012-abcdefghij", "sk-abcdefghijklmnop1234",
    "AKIAIOSFODNN7EXAMPLE", "npm_abcdefghijklmnopqrstuvwxyz012345", "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoaWprbG1ubw",
    "Bearer abc.def", "Basic dXNlcjpwYXNz", "Authorization: basic YWxpY2U6czNjcjN0", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc",
    "-----BEGIN RSA PRIVATE KEY-----MIIE",
]
HARMLESS = {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "veth0",
            "NCCL_DEBUG": "INFO", "NCCL_NET": "IB", "FI_PROVIDER": "efa", "MASTER_ADDR": "10.0.0.1",
            "NCCL_DEBUG_FILE": "/runs/x/logs/nccl.%h.%p.log", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
            # an InfiniBand partition key is the fabric's partition, not a credential
            "NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x7fff"}


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_are_redacted(name):
    assert redacted_env({name: "plain-looking-value", **HARMLESS}) == {name: REDACTED, **HARMLESS}


@pytest.mark.parametrize("value", SECRET_VALUES)
def test_secret_values_are_redacted_whatever_the_name(value):
    assert redacted_env({"NCCL_ODD": value})["NCCL_ODD"] == REDACTED
    assert value not in redact_text(f"python -m trainer r.yaml model.path={value} seed=1")
    assert value not in str(redact_tree({"model": {"path": value}, "argv": ["x", f"data.dataset={value}"]}))


def test_redaction_keeps_fabric_settings_and_plain_text():
    assert redacted_env(HARMLESS) == HARMLESS
    text = "python -m trainer recipes/tiny.yaml model.path=/models/Llama-2-70b-hf train.lr=2e-4"
    assert redact_text(text) == text


def test_markdown_escapes_user_text():
    assert md_escape("a|b") == "a\\|b"
    assert md_escape("<img src=x onerror=alert(1)>") == "\\<img src=x onerror=alert(1)>"  # no tag: CommonMark
    assert md_escape("[click](http://evil)") == "\\[click\\](http://evil)"
    assert md_escape("line\n# heading") == "line # heading"  # no line break: no heading
    assert md_escape("$x^2$ **b** `c`") == "\\$x^2\\$ \\*\\*b\\*\\* \\`c\\`"
    assert md_escape("all_reduce 25.0% (partial: 4.1 kB)") == "all_reduce 25.0% (partial: 4.1 kB)"


HOSTILE = "$\\frac{a$ <script>alert(1)</script> [x](http://e) | **b**"


@pytest.mark.integration
def test_report_and_compare_with_a_hostile_run_name(tmp_path):
    a = write_run(tmp_path / "a", name=HOSTILE)
    b = write_run(tmp_path / "b", name="$unbalanced", step_time=2.0)
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(a)], cwd=REPO, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (a / "report" / "report.md").read_text()
    assert "\\<script>" in md and "\\</script>" in md and "\\[x\\](http://e)" in md
    assert "<script>" not in MarkdownIt("commonmark").enable("table").render(md)
    assert "<script>" not in (a / "report" / "report.html").read_text()
    # outside the lab, compare labels runs by transport and name: the names reach matplotlib's legends
    # labels given on the command line name the columns, legends and tick labels
    proc = subprocess.run([sys.executable, "-m", "telemetry", "compare", f"{HOSTILE}={a}", f"$unbalanced={b}",
                           "--out", str(tmp_path / "cmp")], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "\\$unbalanced" in md and "\\<script>" in md and "\\$\\\\frac{a\\$" in md
    assert (tmp_path / "cmp" / "comm.png").stat().st_size > 1000


@pytest.mark.parametrize("text", [
    "model.path: 'hf-internal-testing/tiny-random-gpt2' is not in the local cache",  # the hub's test models
    "data.dataset: '/data/hf_datasets/wikitext' does not exist", "output_dir: '/scratch/hf_cache_dir/run1'",
    "ghs_runner_workdir/npm-packages-dir",
    # prose after "Basic": Basic authorization is base64 of user:password, which these are not
    "name: 'basic lora' names another recipe's run", "Basic settings apply", "basic Zm9vYmFy",
    # a name or path after an OpenAI/GitLab/Slack-style prefix, shorter than any such token
    "data.dataset: '/data/sk-learn-models/train.jsonl' does not exist", "name: 'sk-llama-lora-v1'"])
def test_error_lines_keep_hub_names_and_paths(text):
    # every error: line is redacted: a hub name or path that starts like a token prefix is no token
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [
    "data.dataset: '/data/sk-learn-models-checkpoints/train.jsonl' does not exist",
    "output_dir: '/scratch/sk-hynix-cluster-benchmarks/run1'", "name: 'sk-image-classification-baseline'"])
def test_a_long_name_after_sk_is_no_token(text):
    # an OpenAI/Anthropic key after 'sk-' is random text (48 letters and digits, or base64url in long runs); a
    # name of words joined by '-' is not, however long
    assert redact_text(text) == text


@pytest.mark.parametrize("token", ["sk-" + "aB3" * 16, "sk-proj-" + "Ab1_" * 4 + "x9Yz" * 10 + "-Qw2" * 6,
                                   "sk-ant-api03-" + "Zx9-" * 3 + "aBcD3fGh" * 10 + "AA"])
def test_openai_and_anthropic_keys_are_still_redacted(token):
    assert token not in redact_text(f"python -m trainer r.yaml model.path={token} seed=1")


def test_redaction_is_linear_in_a_run_of_token_prefixes():
    # every '-' ends a word, so each 'SK-' could start a token: a look-ahead scanned the rest of the run from
    # each one (24 KB took seconds). Counted, not timed: the pattern must decide each start once.
    import telemetry.redaction as redaction

    text = "SK-" * 8000
    assert redact_text(text) == text
    tried = redaction.TOKEN_RUN.findall(text)
    assert len(tried) <= 1  # the whole run is one candidate, judged once


def test_a_lower_case_word_after_asia_is_no_aws_key():
    # an AWS access key id is AKIA/ASIA and 16 capitals or digits: the pattern took 'asia' + 16 letters in any case
    text = "data.dataset: '/data/asiapacificsalesdata.jsonl' does not exist"
    assert redact_text(text) == text
    assert "AKIAIOSFODNN7EXAMPLE" not in redact_text("key AKIAIOSFODNN7EXAMPLE")


def test_a_path_after_pypi_is_no_pypi_token():
    # a PyPI token is 'pypi-' and a macaroon, whose base64 starts 'AgE': a mirror's path is a name
    text = "data.dataset: '/srv/pypi-mirror-packages-cache/train.jsonl' does not exist"
    assert redact_text(text) == text
    assert "pypi-AgENdGVzdC5weXBpLm9yZwIkYWJj" not in redact_text("token pypi-AgENdGVzdC5weXBpLm9yZwIkYWJj")


@pytest.mark.parametrize("url,kept", [
    ("http://gw:9091/?token=s3cr3tvalue", "http://gw:9091/?token=<redacted>"),
    ("https://b.s3.amazonaws.com/x?X-Amz-Signature=abcd1234&X-Amz-Date=2026", "X-Amz-Signature=<redacted>&X-Amz-Date"),
    ("https://hub/d.jsonl?api_key=k1&download=1", "?api_key=<redacted>&download=1"),
])
def test_a_secret_in_a_url_query_is_redacted_and_its_name_kept(url, kept):
    # a pushgateway address with ?token=... was printed whole in its error line (a launcher keeps stderr)
    assert kept in redact_text(f"error: telemetry.pushgateway: got {url!r}")
    assert redacted_env({"NCCL_ODD": url})["NCCL_ODD"] == REDACTED


def test_a_url_with_a_password_keeps_its_scheme_and_host_around_the_redaction():
    # the line read "model.path: 'https<redacted>hub.example/m' is not a directory"
    assert redact_text("model.path: 'https://u:s3cr3t@hub.example/m' is not a directory") == (
        "model.path: 'https://<redacted>@hub.example/m' is not a directory")


def test_query_words_that_only_hold_a_secret_name_are_kept():
    assert redact_text("http://h/?monkey=1&keyboard=2") == "http://h/?monkey=1&keyboard=2"


def test_query_redaction_is_linear_in_a_run_of_separators():
    import time
    start = time.monotonic()
    redact_text("?" + "a." * 100000 + "x=1")
    assert time.monotonic() - start < 5  # exponential backtracking took minutes at 30 separators
