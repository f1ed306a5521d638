"""The API's error envelope (controlplane.apps.common.errors, DRF validation errors) as one line."""

from __future__ import annotations

import pytest

from controlplane.cli.client import ApiError, ExitCode, error_words, normalise_server


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"detail": "Invalid token."}, "Invalid token."),
        (
            {"detail": "Task 3 is cancelled and cannot be cancelled.", "code": "conflict"},
            "Task 3 is cancelled and cannot be cancelled.",
        ),
        (
            {"name": ["This field is required."], "num_layers": ["Too small.", "Not a divisor."]},
            "name: This field is required.; num_layers: Too small. Not a divisor.",
        ),
        (
            {"non_field_errors": ["hidden_size must be a multiple of num_attention_heads."]},
            "hidden_size must be a multiple of num_attention_heads.",
        ),
        (
            {"devices": [{}, {"kind": ["This field is required."]}]},
            "devices[1].kind: This field is required.",
        ),
        (["A list of messages."], "A list of messages."),
    ],
)
def test_error_words(payload: object, words: str) -> None:
    assert error_words(payload) == words


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, ExitCode.API_REFUSED),
        (404, ExitCode.API_REFUSED),
        (409, ExitCode.API_REFUSED),
        (401, ExitCode.AUTH),
        (403, ExitCode.AUTH),
        (500, ExitCode.SERVER),
        (503, ExitCode.SERVER),
        (None, ExitCode.SERVER),
    ],
)
def test_exit_code_follows_the_status(status: int | None, code: ExitCode) -> None:
    assert ApiError("x", status).exit_code == code


@pytest.mark.parametrize(
    "given",
    ["127.0.0.1:8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/api/v1/"],
)
def test_a_server_address_is_normalised(given: str) -> None:
    assert normalise_server(given) == "http://127.0.0.1:8000"


@pytest.mark.parametrize("given", ["", "ftp://host", "http://"])
def test_a_bad_server_address_is_refused(given: str) -> None:
    with pytest.raises(ValueError):
        normalise_server(given)
