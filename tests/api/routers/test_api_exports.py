"""The API's exports of names that look like formulas: text in the workbook, escaped in the CSV."""

from __future__ import annotations

import csv
import io

from openpyxl import load_workbook

from gpuplan.planner.io.exporters.workbook import FORMULA_START
from tests._api import PLANNER, Server, live, tiny_body

__all__ = ["live"]

LINK = '=HYPERLINK("http://evil.example","click")'
DDE = "+cmd|' /C calc'!A0"


def test_exported_names_are_never_formulas(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    body["cluster"]["nodes"][0]["name"] = "=1+1"
    body["workloads"][0]["id"] = LINK
    body["workloads"][1]["id"] = DDE
    body["workloads"][2]["id"] = "@SUM(A1)"
    with live.client(PLANNER) as c:
        r = c.post("/v1/plans", params={"wait": 30}, json=body)
        assert r.status_code == 200, r.text
        job = r.json()["job"]["id"]
        book = c.get(f"/v1/plans/{job}/export.xlsx")
        placements = c.get(f"/v1/plans/{job}/export.csv", params={"sheet": "Placements"})
    assert book.status_code == 200 and placements.status_code == 200
    cells = [
        c for ws in load_workbook(io.BytesIO(book.content)).worksheets for row in ws.iter_rows() for c in row
    ]
    assert not [c.coordinate for c in cells if c.data_type == "f"]
    assert {LINK, DDE, "@SUM(A1)", "=1+1"} <= {c.value for c in cells}
    fields = [f for row in csv.reader(io.StringIO(placements.text)) for f in row]
    assert not [f for f in fields if f.startswith(FORMULA_START)]
    assert {"'" + LINK, "'" + DDE, "'@SUM(A1)"} <= set(fields)
