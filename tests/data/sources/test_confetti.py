"""The ConFETTI adapter: tiny question files written here, joined with the real answer files."""

import json

import pytest

from data.errors import DataError, SourceUnavailable
from data.sources import IngestReport, read_source


def _doc(name, *params):
    return {"name": name, "description": name, "parameters": {"type": "dict", "properties": {p: {"type": "string"} for p in params}}}


def _questions(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def _turns(*pairs):
    return [{"role": r, "content": c, "content_type": "text"} for r, c in pairs]


def test_conversationsclean_joined_with_real_answers(shared_data, tmp_path):
    q = _questions(tmp_path, "BFCL_v2_conversationsclean.json", [
        {"id": "conversationsclean_0", "dialog_id": "0b28ca41-19f0-44fb-b2b0-f4097e5d6f35_0",
         "question": _turns(("user", "Who is Shalissa Valentino?")),
         "function": [_doc("HRCompanyDirectory_employees", "name")]},
        {"id": "conversationsclean_1", "dialog_id": "0b28ca41-19f0-44fb-b2b0-f4097e5d6f35_1",
         "question": _turns(("user", "Who is Shalissa Valentino?"), ("assistant", "She is in HR."), ("user", "Her time off?")),
         "function": [_doc("HRTimeOff_time_off_balance", "employee_id")]},
        {"id": "conversationsclean_99999", "question": _turns(("user", "x")), "function": []},
    ])
    report = IngestReport()
    ex = read_source("confetti", str(shared_data / "confetti"), report, questions=q)
    assert [e.id for e in ex] == ["confetti:conversationsclean_0", "confetti:conversationsclean_1"]
    assert ex[0].category == "conversationsclean" and ex[0].meta["dialog_id"].endswith("_0")
    assert ex[0].expected.alternatives[0][0].args["name"].values == ["Shalissa Valentino"]
    assert [m.role for m in ex[1].messages] == ["user", "assistant", "user"]
    assert ex[1].expected.alternatives[0][0].args["employee_id"].values == ["335243"]
    assert report.skipped[("confetti", "conversationsclean: no answer for id")] == 1


def test_dialogacts_calls_and_no_call(shared_data, tmp_path):
    q = _questions(tmp_path, "BFCL_v2_dialogacts.json", [
        {"id": "dialogacts_1", "question": _turns(("user", "Cancel my fibre.")),
         "function": [_doc("Telecom_ViewAccount", "to", "last_name", "verification_code"),
                      _doc("Telecom_CancelService", "account_id", "service_id", "cancellation_reason")]},
        {"id": "dialogacts_11", "question": _turns(("user", "What internet is there?")), "function": []},
        # `class=` is a Python keyword: the call string is repaired before parsing
        {"id": "dialogacts_64", "question": _turns(("user", "File a claim.")), "function": []},
    ])
    ex = {e.id: e for e in read_source("confetti", str(shared_data / "confetti"), questions=q)}
    calls = ex["confetti:dialogacts_1"].expected.alternatives[0]
    assert [c.name for c in calls] == ["Telecom_ViewAccount", "Telecom_CancelService"]  # dots mapped to the docs' names
    assert calls[1].args["service_id"].values == ["fibre382-1"]
    assert ex["confetti:dialogacts_1"].meta["dialog_acts"] == ["agent_function_calling", "agent_inform_user"]
    assert ex["confetti:dialogacts_11"].expected.no_call  # the agent should ask, not call
    (claim,) = ex["confetti:dialogacts_64"].expected.alternatives[0]
    assert claim.name == "Insurance.file_claim" and claim.args["amount"].values == [8000]


def test_keyword_argument_name(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / "BFCL_v2_dialogacts.json").write_text(json.dumps(
        {"id": "d0", "ground_truth": ["agent_function_calling"],
         "ground_truth_content": ["BookFlight.book_flight(itinerary_number=['PR6378'],class=['Business'])", "Booked."]}) + "\n")
    q = _questions(tmp_path, "BFCL_v2_dialogacts.json", [{"id": "d0", "question": _turns(("user", "book it")), "function": []}])
    (ex,) = read_source("confetti", str(tmp_path), questions=q)
    assert ex.expected.alternatives[0][0].args["class"].values == ["Business"]


def test_question_file_missing_is_unavailable(shared_data, tmp_path):
    with pytest.raises(SourceUnavailable, match=r"BFCL_v2_conversationsclean\.json.*github\.com/amazon-science/confetti"):
        read_source("confetti", str(shared_data / "confetti"))
    with pytest.raises(SourceUnavailable, match=r"nowhere\.json: question file not found"):
        read_source("confetti", str(shared_data / "confetti"), questions=str(tmp_path / "nowhere.json"))


def test_bad_question_row_names_file_line_field(shared_data, tmp_path):
    q = _questions(tmp_path, "BFCL_v2_conversationsclean.json", [
        {"id": "conversationsclean_0", "question": [{"role": "narrator", "content": "x"}], "function": []}])
    with pytest.raises(DataError, match=r"BFCL_v2_conversationsclean\.json:1: field 'question\[0\]\.role'"):
        read_source("confetti", str(shared_data / "confetti"), questions=q)
