"""engine.remote.addresses: a lent computer typed two ways is one stored address."""

from __future__ import annotations

import getpass

import pytest

from engine.errors import BadInputError
from engine.remote.addresses import parse_address


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("tcp://10.0.0.5", "tcp://10.0.0.5:50052"),
        ("tcp://10.0.0.5:50100", "tcp://10.0.0.5:50100"),
        ("tcp://[fe80::1]:50100", "tcp://[fe80::1]:50100"),
        ("ssh://me@desk-pc", "ssh://me@desk-pc:22"),
        ("ssh://me@desk-pc:2222?rpc-port=50100", "ssh://me@desk-pc:2222?rpc-port=50100"),
        (" ssh://me@desk-pc:22/ ", "ssh://me@desk-pc:22"),
    ],
)
def test_an_address_has_one_canonical_form_that_reads_back_as_itself(
    typed: str, canonical: str
) -> None:
    assert str(parse_address(typed)) == canonical
    assert parse_address(canonical) == parse_address(typed)


def test_ssh_defaults_to_this_user_and_takes_the_rpc_port_given() -> None:
    address = parse_address("ssh://desk-pc", rpc_port=50200)
    assert address.user == getpass.getuser() and address.rpc_port == 50200
    assert address.through_ssh and str(address).endswith("?rpc-port=50200")


@pytest.mark.parametrize(
    "typed",
    [
        "desk-pc",
        "http://desk-pc",
        "tcp://me@desk-pc",
        "tcp://h:99999",
        "ssh://h/x",
        "ssh://h?rpc-port=x",
    ],
)
def test_what_is_not_an_address_is_bad_input(typed: str) -> None:
    with pytest.raises(BadInputError):
        parse_address(typed)
