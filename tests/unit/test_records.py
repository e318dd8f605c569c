"""Records files: both formats, values as written, errors with their positions, the profile check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatekeeper.policy import Record
from gatekeeper.records import RecordsError, load_records_file, parse_records
from rwcore import get_profile
from tests.seed import RECORD_VALUES

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "records.example.json"
#: the seed's record for the PAY handoff, without the item (the records file keys it)
PAY = {k: v for k, v in RECORD_VALUES.items() if k != "item"}


def _errors(text: str, **kw: object) -> tuple[str, ...]:
    with pytest.raises(RecordsError) as info:
        parse_records(text, source="r.json", **kw)  # type: ignore[arg-type]
    assert str(info.value).startswith("records file r.json: ")
    return info.value.errors


def test_mapping_of_items_to_records() -> None:
    [rec] = parse_records(json.dumps({"inv:MD-2026-057": PAY}))
    assert rec.key.item == "inv:MD-2026-057" and rec.key.ask == "PAY"
    assert rec.values == {"item": "inv:MD-2026-057", **PAY}
    assert rec.resolved == {} and rec.expect_acc is None


def test_mapping_to_a_list_of_records_with_resolved_and_expect_acc() -> None:
    text = json.dumps(
        {
            "sup:marlow": [
                {"ask": "CHGBANK", "to": "payer", "acct": "40-12-88/61102938", "resolved": {"prev": "20-45-17/33"}},
                {"ask": "DRAFT", "to": "desk", "expect_acc": "len:120w+tone:plain"},
            ]
        }
    )
    bank, draft = parse_records(text)
    assert bank.resolved == {"prev": "20-45-17/33"} and "resolved" not in bank.values
    assert draft.expect_acc == ("len:120w", "tone:plain") and "expect_acc" not in draft.values
    assert (bank.item, draft.item) == ("sup:marlow", "sup:marlow")


def test_json_lines() -> None:
    lines = [
        json.dumps({"item": "inv:MD-2026-057", **PAY}),
        "",
        json.dumps({"item": "inv:MD-2026-058", "ask": "DRAFT", "to": "desk", "expect_acc": ["len:120w"]}),
    ]
    pay, draft = parse_records("\n".join(lines) + "\n")
    assert pay.item == "inv:MD-2026-057" and draft.item == "inv:MD-2026-058"
    assert draft.expect_acc == ("len:120w",)


def test_one_json_line_is_one_record() -> None:
    [rec] = parse_records(json.dumps({"item": "inv:X", "ask": "PAY", "to": "payer"}))
    assert rec.item == "inv:X"


def test_a_top_level_list_of_records() -> None:
    [rec] = parse_records(json.dumps([{"item": "inv:X", "ask": "PAY", "to": "payer"}]))
    assert rec.key.item == "inv:X"


def test_values_are_kept_as_written() -> None:
    [rec] = parse_records(
        json.dumps({"inv:X": {"ask": "PAY", "pri": 2, "flag": ["OVERLIM", "FX"], "retry": True, "amt": "5400.00"}})
    )
    assert rec.values["pri"] == "2"
    assert rec.values["flag"] == ["OVERLIM", "FX"]  # a JSON list; the record check compares it +-joined
    assert rec.values["retry"] == "Y"
    assert rec.values["amt"] == "5400.00"


def test_records_round_trip_through_to_dict() -> None:
    for rec in load_records_file(EXAMPLE):
        assert Record.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec


def test_the_example_file_holds_the_seed_payment_a_bank_change_and_a_comprehension_record() -> None:
    records = {(r.item, r.ask): r for r in load_records_file(EXAMPLE, get_profile("pay"))}
    pay = records["inv:MD-2026-057", "PAY"]
    assert pay.values == {"item": "inv:MD-2026-057", **PAY}
    assert "prev" in records["sup:marlow", "CHGBANK"].resolved
    assert records["inv:MD-2026-057", "DRAFT"].expect_acc


# ---------------------------------------------------------------- errors, with positions


def test_errors_in_json_lines_name_the_line_and_key() -> None:
    text = "\n".join(
        [
            json.dumps({"item": "inv:A", **PAY}),
            json.dumps({"item": "inv:B", "to": "payer"}),
            "{not json",
            json.dumps({"ask": "PAY"}),
            json.dumps({"item": "inv:C", "ask": "PAY", "amt": 5400.00}),
        ]
    )
    errors = _errors(text)
    assert "line 2: ask: missing" in errors[0]
    assert errors[1].startswith("line 3: not JSON")
    assert "line 4: item: missing" in errors[2]
    assert errors[3].startswith("line 5: amt: write numbers as strings") and '"5400.00"' in errors[3]
    assert len(errors) == 4


def test_errors_in_the_mapping_name_the_entry_and_key() -> None:
    text = json.dumps(
        {
            "inv:A": PAY,
            "inv:B": [PAY, {"ask": "DRAFT", "to": "desk", "tail": "two words"}],
            "inv:C": {"item": "inv:D", "ask": "PAY"},
            "inv:E": "PAY",
        }
    )
    errors = _errors(text)
    assert errors[0] == "entry 2 (inv:B) record 2: tail: 'two words': values have no spaces on an RW1 line"
    assert errors[1].startswith("entry 3 (inv:C): item: 'inv:D' differs from the key")
    assert errors[2] == "entry 4 (inv:E): expected a record object, got a string"


def test_one_record_per_item_and_ask() -> None:
    errors = _errors(json.dumps({"inv:A": [PAY, PAY]}))
    assert errors == ("item inv:A ask PAY: more than one record for this (item, ask)",)


def test_duplicate_keys_are_refused_not_silently_dropped() -> None:
    errors = _errors('{"inv:A": {"ask": "PAY", "amt": "1.00", "amt": "2.00"}}')
    assert errors == ("key 'amt' appears twice in one object",)


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"ask": "PAY", "resolved": ["prev"]}, "resolved: expected an object"),
        ({"ask": "PAY", "expect_acc": ["len120w"]}, "expect_acc: each criterion is key:value"),
        ({"ask": "PAY", "expect_acc": 3}, "expect_acc: expected a list"),
        ({"ask": "PAY", "Amt": "1.00"}, "Amt: not a slot name"),
        ({"ask": "PAY", "flag": ["A+B"]}, "flag: element 0: 'A+B' contains '+'"),
        ({"ask": "PAY", "sup": None}, "sup: expected a string, got null"),
        ({"ask": "PA Y"}, "ask: must be a non-empty ASCII string"),
    ],
)
def test_bad_values(obj: dict[str, object], needle: str) -> None:
    [error] = _errors(json.dumps({"inv:A": obj}))
    assert error.startswith("entry 1 (inv:A): ") and needle in error


@pytest.mark.parametrize(("text", "needle"), [("", "empty"), ("[1", "not JSON"), ('"x"', "top level is a string")])
def test_unusable_files(text: str, needle: str) -> None:
    [error] = _errors(text)
    assert needle in error


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecordsError, match="does not exist"):
        load_records_file(tmp_path / "nope.json")


# ---------------------------------------------------------------- against a profile


def test_profile_check_names_unknown_slots_and_bad_values() -> None:
    bad = {
        **PAY,
        "amt": "5,400.00",
        "paid": "2026-10-02",
        "cur": "XXX",
        "colour": "red",
        "prev": "1/2",
        "to": "nobody",
        "resolved": {"nosuch": "1"},
    }
    errors = _errors(json.dumps({"inv:A": bad}), profile=get_profile("pay"))
    text = "\n".join(errors)
    assert "entry 1 (inv:A): amt: 5,400.00: money is digits with exactly two decimals" in text
    assert "paid: 2026-10-02: dates are YYYYMMDD" in text
    assert "cur: XXX: not one of cur (EUR GBP USD)" in text
    assert "colour: unknown slot under profile pay" in text
    assert "prev: an HO does not carry prev under profile pay" in text
    assert "to: nobody: not an agent named in profile pay" in text
    assert "resolved.nosuch: unknown slot under profile pay" in text


def test_without_a_profile_slot_values_are_not_checked() -> None:
    [rec] = parse_records(json.dumps({"inv:A": {**PAY, "amt": "5,400"}}))
    assert rec.values["amt"] == "5,400"
