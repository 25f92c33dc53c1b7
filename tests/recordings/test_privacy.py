import pytest

from recordings.privacy import mask_number


@pytest.mark.parametrize(
    ("number", "masked"),
    [
        ("+15551234567", "+1***4567"),
        ("+442079460958", "+44***0958"),
        ("+353861234567", "+353***4567"),
        ("+4915112345678", "+49***5678"),
    ],
)
def test_only_the_country_code_and_the_last_four_stay(number, masked):
    assert mask_number(number) == masked


@pytest.mark.parametrize(
    "number", ["+1555123", "+15551234", "911", "anonymous", "client:alice", "", "+1555-123-4567"]
)
def test_anything_too_short_or_not_e164_is_fully_hidden(number):
    assert mask_number(number) == "***"
