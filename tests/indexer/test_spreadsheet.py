"""Spreadsheets and tables made here (Excel workbooks with zipfile, OpenDocument spreadsheets, CSV and TSV text)
through ``indexer.spreadsheet`` and ``corpus from-files``: one passage a row, its cells after their column's name,
with its sheet and row; cached formula values, dates and percentages as shown; hidden sheets and rows left out; huge
sheets bounded; damaged, renamed and hostile files named with what is wrong.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_spreadsheet.py
"""

from __future__ import annotations

import logging
import time
import zipfile
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer import spreadsheet
from spanseek.indexer.extracted import IngestError, Unreadable
from spanseek.indexer.ingest import IngestOptions, extract_file, from_files
from spanseek.indexer.spreadsheet import extract_ods, extract_xlsx
from tests.indexer.test_opendocument import NS, write_odt

MAIN = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
REL = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
STRINGS = ["Item", "Price", "Stock", "Shipped", "Tea", "Coffee", "Share", "Secret"]
STYLES = ('<numFmts count="1"><numFmt numFmtId="164" formatCode="yyyy\\-mm\\-dd"/></numFmts>'
          '<cellXfs count="4"><xf numFmtId="0"/><xf numFmtId="164"/><xf numFmtId="10"/><xf numFmtId="22"/></cellXfs>')
PRICES = (
    '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c><c r="C1" t="s"><v>2</v></c>'
    '<c r="D1" t="s"><v>3</v></c><c r="E1" t="s"><v>6</v></c></row>'
    '<row r="2"><c r="A2" t="s"><v>4</v></c><c r="B2"><v>3.2000000000000002</v></c><c r="C2"><f>20*2</f><v>40</v></c>'
    '<c r="D2" s="1"><v>45356</v></c><c r="E2" s="2"><v>0.125</v></c></row>'
    '<row r="3" hidden="1"><c r="A3" t="s"><v>7</v></c></row>'
    '<row r="5"><c r="A5" t="inlineStr"><is><t>Cocoa</t></is></c><c r="B5" t="e"><f>1/0</f><v>#DIV/0!</v></c>'
    '<c r="C5"><f>B2*3</f></c><c r="D5" s="3"><v>45356.604166666664</v></c><c r="E5" t="b"><v>1</v></c></row>'
)


def write_xlsx(path: Path, sheets: dict[str, str] | None = None, hidden: tuple[str, ...] = ("Old",),
               title: str = "Price list", parts: dict[str, str] | None = None, head: str = "",
               cols: str = "") -> Path:
    sheets = sheets if sheets is not None else {"Prices 2024": PRICES, "Old": '<row r="1"><c t="s"><v>7</v></c></row>',
                                                "Notes": '<row r="2"><c r="B2" t="s"><v>5</v></c></row>'}
    entries = "".join(f'<sheet name="{name}" sheetId="{i}" r:id="rId{i}"'
                      + (' state="hidden"' if name in hidden else "") + "/>" for i, name in enumerate(sheets, 1))
    rels = "".join(f'<Relationship Id="rId{i}" Type="worksheet" Target="worksheets/sheet{i}.xml"/>'
                   for i in range(1, len(sheets) + 1))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", f"<workbook {MAIN} {REL}><sheets>{entries}</sheets></workbook>")
        z.writestr("xl/_rels/workbook.xml.rels", '<Relationships xmlns="http://schemas.openxmlformats.org/package/'
                   f'2006/relationships">{rels}</Relationships>')
        z.writestr("xl/sharedStrings.xml", f"<sst {MAIN}>" + "".join(
            f"<si><t>{s}</t></si>" if s != "Share" else '<si><r><t>Sh</t></r><r><t>are</t></r><rPh><t>x</t></rPh></si>'
            for s in STRINGS) + "</sst>")
        z.writestr("xl/styles.xml", f"<styleSheet {MAIN}>{STYLES}</styleSheet>")
        for i, rows in enumerate(sheets.values(), 1):
            z.writestr(f"xl/worksheets/sheet{i}.xml", f"{head}<worksheet {MAIN}>{cols}<sheetData>{rows}</sheetData></worksheet>")
        z.writestr("docProps/core.xml", '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/'
                   f'metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title>'
                   "<dc:creator>Ann Gala</dc:creator></cp:coreProperties>")
        for name, text in (parts or {}).items():
            z.writestr(name, text)
    return path


def test_a_workbook_reads_a_passage_a_row_named_by_its_header_with_its_sheet_and_row(tmp_path):
    """The header row names the cells; a formula gives its cached value (none when never computed or an error); a
    date, a date and time, a percentage and a truth value as shown; a number in its shortest form; a hidden sheet and
    a hidden row left out; rich text read without its phonetic guide; the sheet's name leads where there are two."""
    ext = extract_xlsx(write_xlsx(tmp_path / "p.xlsx"))
    assert ext.title == "Price list" and ext.meta == {"title": "Price list", "author": "Ann Gala", "sheets": 2}
    assert list(zip(ext.paragraphs, ext.paragraph_meta, strict=True)) == [
        ("Prices 2024 \u2014 Item: Tea; Price: 3.2; Stock: 40; Shipped: 2024-03-05; Share: 12.5%",
         {"sheet": "Prices 2024", "row": 2}),
        ("Prices 2024 \u2014 Item: Cocoa; Shipped: 2024-03-05 14:30; Share: TRUE", {"sheet": "Prices 2024", "row": 5}),
        ("Notes \u2014 Coffee", {"sheet": "Notes", "row": 2})]


def test_rows_past_the_hundred_thousandth_keep_their_number(tmp_path):
    """Row 150000 after row 2 (the rows between empty) was said to be row 3: a row's number of six digits or more
    was not read, and the row counted on from the one before."""
    rows = ('<row r="1"><c r="A1" t="s"><v>0</v></c></row><row r="2"><c r="A2" t="s"><v>4</v></c></row>'
            '<row r="150000"><c r="A150000" t="s"><v>5</v></c></row><row><c t="s"><v>7</v></c></row>')
    ext = extract_xlsx(write_xlsx(tmp_path / "r.xlsx", {"Log": rows}, ()))
    assert ext.paragraph_meta == [{"sheet": "Log", "row": 2}, {"sheet": "Log", "row": 150000},
                                  {"sheet": "Log", "row": 150001}]


def test_a_sheet_whose_first_row_holds_numbers_has_no_header(tmp_path):
    rows = ('<row r="1"><c r="A1"><v>2023</v></c><c r="B1"><v>2024</v></c></row>'
            '<row r="2"><c r="A2"><v>7</v></c><c r="C2" t="s"><v>4</v></c></row>')
    ext = extract_xlsx(write_xlsx(tmp_path / "y.xlsx", {"Years": rows}, ()))
    assert ext.paragraphs == ["2023 2024", "7 Tea"] and ext.meta["sheets"] == 1


def test_a_title_over_the_table_is_a_passage_of_its_own_and_the_row_under_it_names_the_columns(tmp_path):
    """A one-cell first row over a wider one ("Price list 2024" in A1, the header in row 3) named only the first
    column, and the header row read as a row of the table ("Price list 2024: Item; Price")."""
    rows = ('<row r="1"><c r="A1" t="inlineStr"><is><t>Price list 2024</t></is></c></row>'
            '<row r="3"><c r="A3" t="s"><v>0</v></c><c r="B3" t="s"><v>1</v></c></row>'
            '<row r="4"><c r="A4" t="s"><v>4</v></c><c r="B4"><v>3.2</v></c></row>')
    ext = extract_xlsx(write_xlsx(tmp_path / "t.xlsx", {"Prices": rows}, ()))
    assert list(zip(ext.paragraphs, ext.paragraph_meta, strict=True)) == [
        ("Price list 2024", {"sheet": "Prices", "row": 1}), ("Item: Tea; Price: 3.2", {"sheet": "Prices", "row": 4})]


def test_a_one_cell_first_row_right_of_the_tables_edge_names_its_column(tmp_path):
    """A header whose only name is over column B (column A holds the rows' names) was taken for a title: the names
    were lost and the first row of data named the columns of the rows under it."""
    (tmp_path / "s.csv").write_text(",Score\nAnn,40\nBob,12\n", encoding="utf-8")
    assert extract_file(tmp_path / "s.csv").paragraphs == ["Ann; Score: 40", "Bob; Score: 12"]
    (tmp_path / "t.csv").write_text("Scores 2024\n\nName,Score\nAnn,40\n", encoding="utf-8")  # (a title still is one)
    assert extract_file(tmp_path / "t.csv").paragraphs == ["Scores 2024", "Name: Ann; Score: 40"]


def test_hidden_columns_are_left_out(tmp_path):
    """A column hidden in Excel (``cols``) or LibreOffice (``table:visibility``) was read as a shown one."""
    rows = ('<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c><c r="C1" t="s"><v>7</v></c></row>'
            '<row r="2"><c r="A2" t="s"><v>4</v></c><c r="B2"><v>3.2</v></c><c r="C2"><v>1.1</v></c></row>')
    path = write_xlsx(tmp_path / "c.xlsx", {"Prices": rows}, (), cols='<cols><col min="3" max="3" hidden="1"/></cols>')
    assert extract_xlsx(path).paragraphs == ["Item: Tea; Price: 3.2"]
    table = ('<table:table table:name="S"><table:table-column table:number-columns-repeated="2"/>'
             '<table:table-column table:visibility="collapse"/>'
             f"<table:table-row>{cell('Item')}{cell('Count')}{cell('Secret')}</table:table-row>"
             f"<table:table-row>{cell('Tea')}{cell('40', 'float')}{cell('x')}</table:table-row></table:table>")
    ods = write_odt(tmp_path / "c.ods", content=ods_content(table),
                    mimetype="application/vnd.oasis.opendocument.spreadsheet")
    assert extract_ods(ods).paragraphs == ["Item: Tea; Count: 40"]


def test_many_hidden_column_definitions_cost_no_more_than_one(tmp_path):
    """Every other column hidden, by 8,000 definitions, under rows of 16,000 cells (a 6 KB file): each cell was tried
    against each definition, some 5 s of CPU a row."""
    columns = '<table:table-column table:visibility="collapse"/><table:table-column/>' * 8000
    wide = ('<table:table-cell office:value-type="float" office:value="1" table:number-columns-repeated="16000">'
            "<text:p>1</text:p></table:table-cell>")
    table = f'<table:table table:name="S">{columns}' + f"<table:table-row>{wide}</table:table-row>" * 3 + "</table:table>"
    path = write_odt(tmp_path / "h.ods", content=ods_content(table),
                     mimetype="application/vnd.oasis.opendocument.spreadsheet")
    start = time.process_time()
    ext = extract_ods(path)
    assert time.process_time() - start < 1
    assert ext.paragraphs == [" ".join(["1"] * 8000)] * 3


def test_csv_and_tsv_files_read_a_passage_a_record_in_their_sniffed_dialect(tmp_path):
    (tmp_path / "a.csv").write_bytes("\ufeffItem;Price;Note\r\nTea;3,20;\"loose; green\"\r\n\r\nCaf\u00e9;4,5;\n"
                                     .encode("utf-8"))
    ext = extract_file(tmp_path / "a.csv")
    assert list(zip(ext.paragraphs, ext.paragraph_meta, strict=True)) == [
        ("Item: Tea; Price: 3,20; Note: loose; green", {"sheet": "a", "row": 2}),
        ("Item: Caf\u00e9; Price: 4,5", {"sheet": "a", "row": 4})]
    (tmp_path / "b.tsv").write_text("Port\tHigh tide\nKirkwall\t06:10\n", encoding="utf-16")
    assert extract_file(tmp_path / "b.tsv").paragraphs == ["Port: Kirkwall; High tide: 06:10"]
    (tmp_path / "c.csv").write_text("one column\nTea\nCoffee\n", encoding="utf-8")
    assert extract_file(tmp_path / "c.csv").paragraphs == ["one column: Tea", "one column: Coffee"]


def test_damaged_csv_files_are_named_with_the_line(tmp_path):
    (tmp_path / "open.csv").write_text('a,b\n1,2\n3,"never closed\n4,5\n', encoding="utf-8")
    with pytest.raises(Unreadable, match=r"^not a readable CSV file: the record from line 3: unexpected end of data"):
        extract_file(tmp_path / "open.csv")
    (tmp_path / "stray.csv").write_text('a,b\n1,"2"x\n', encoding="utf-8")
    with pytest.raises(Unreadable, match=r"^not a readable CSV file: the record from line 2: ',' expected after '\"'"):
        extract_file(tmp_path / "stray.csv")
    (tmp_path / "latin.csv").write_bytes("Caf\u00e9,1\n".encode("latin-1"))
    with pytest.raises(Unreadable, match=r"^not UTF-8 \(byte 0xe9 at offset 3\)"):
        extract_file(tmp_path / "latin.csv")


HIDDEN_SHEET = ('<office:automatic-styles><style:style style:name="ta2" style:family="table">'
                '<style:table-properties table:display="false"/></style:style></office:automatic-styles>')


def ods_content(tables: str) -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {NS}>{HIDDEN_SHEET}<office:body>'
            f"<office:spreadsheet>{tables}</office:spreadsheet></office:body></office:document-content>")


def cell(text: str, kind: str = "string", extra: str = "") -> str:
    value = f' office:value="{text}"' if kind == "float" else ""
    return f'<table:table-cell office:value-type="{kind}"{value}{extra}><text:p>{text}</text:p></table:table-cell>'


FORMULA = ' table:formula="of:=20*2"'
ODS_TABLES = (
    '<table:table table:name="Stock"><table:table-column table:number-columns-repeated="1024"/>'
    f"<table:table-row>{cell('Item')}{cell('Count')}{cell('Since')}</table:table-row>"
    f"<table:table-row>{cell('Tea')}{cell('40', 'float', FORMULA)}"
    '<table:table-cell office:value-type="date" office:date-value="2024-03-05"><text:p>05/03/24</text:p>'
    '</table:table-cell><table:table-cell table:number-columns-repeated="1021"/></table:table-row>'
    f'<table:table-row table:visibility="collapse">{cell("Hidden")}</table:table-row>'
    '<table:table-row table:number-rows-repeated="1048570"><table:table-cell table:number-columns-repeated="1024"/>'
    f"</table:table-row><table:table-row>{cell('Cocoa')}</table:table-row></table:table>"
    f'<table:table table:name="Secret" table:style-name="ta2"><table:table-row>{cell("x")}</table:table-row>'
    "</table:table>")


def test_an_opendocument_spreadsheet_reads_as_a_workbook_does(tmp_path):
    """Cells repeated to the sheet's edge and a million empty rows repeated cost nothing; a hidden sheet and row are
    left out; a date as ISO 8601."""
    path = write_odt(tmp_path / "s.ods", content=ods_content(ODS_TABLES),
                     mimetype="application/vnd.oasis.opendocument.spreadsheet")
    start = time.process_time()
    ext = extract_ods(path)
    assert time.process_time() - start < 0.5
    assert ext.title == "Harbour guide 2026" and ext.meta["sheets"] == 1
    assert list(zip(ext.paragraphs, ext.paragraph_meta, strict=True)) == [
        ("Item: Tea; Count: 40; Since: 2024-03-05", {"sheet": "Stock", "row": 2}),
        ("Item: Cocoa", {"sheet": "Stock", "row": 1048574})]
    flat = tmp_path / "s.fods"
    flat.write_text(f'<office:document {NS} office:mimetype="application/vnd.oasis.opendocument.spreadsheet">'
                    f"{HIDDEN_SHEET}<office:body><office:spreadsheet>{ODS_TABLES}</office:spreadsheet>"
                    "</office:body></office:document>", encoding="utf-8")
    assert extract_file(flat).paragraphs == ext.paragraphs


def test_cells_repeated_past_the_sheets_edge_are_not_read(tmp_path):
    """A row of 1,000 cells each repeated 16,384 times (a 2 KB file) made 16 million cells, some 3 GB, before the
    row was found over the limit; a row ends at the sheet's 16,384th column."""
    wide = '<table:table-cell office:value-type="string" table:number-columns-repeated="16384"><text:p>x</text:p>'
    table = (f'<table:table table:name="S"><table:table-row>{cell("1", "float")}{(wide + "</table:table-cell>") * 1000}'
             f'</table:table-row><table:table-row>{cell("7", "float")}</table:table-row></table:table>')
    path = write_odt(tmp_path / "w.ods", content=ods_content(table),
                     mimetype="application/vnd.oasis.opendocument.spreadsheet")
    start = time.process_time()
    ext = extract_ods(path)
    assert time.process_time() - start < 1
    assert ext.paragraphs == ["1 " + " ".join(["x"] * 16_383), "7"]


def test_huge_sheets_are_cut_off_with_a_warning_naming_the_file_and_where(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(spreadsheet, "MAX_ROWS", 3)
    rows = "".join(f'<row r="{r}"><c r="A{r}" t="s"><v>4</v></c></row>' for r in range(1, 7))
    with caplog.at_level(logging.WARNING, logger="spanseek.indexer.spreadsheet"):
        ext = extract_xlsx(write_xlsx(tmp_path / "big.xlsx", {"Log": rows}, ()))
    assert ext.paragraphs == ["Tea: Tea", "Tea: Tea"]  # (its first row names the column)
    assert f"{tmp_path / 'big.xlsx'}: more than 3 rows or 1,000,000 cells; sheet 'Log' from row 4 on" in caplog.text
    monkeypatch.setattr(spreadsheet, "MAX_CELLS", 5)
    (tmp_path / "wide.csv").write_text("a,b,c\n1,2,3\n4,5,6\n", encoding="utf-8")
    assert extract_file(tmp_path / "wide.csv").paragraphs == ["a b c"]


def test_a_csv_files_records_past_the_limits_are_not_read(tmp_path, monkeypatch, caplog):
    """Every record (up to MAX_ROWS, of any width) was parsed and held before the cell limit applied (a 15 MiB file of
    60 columns took 464 MB to give its first million cells, which take 142 MB), and a damaged record past the limit
    refused the whole file."""
    import tracemalloc

    monkeypatch.setattr(spreadsheet, "MAX_CELLS", 100)
    record = ",".join(f"v{i:07d}" for i in range(50))
    (tmp_path / "big.csv").write_text("\n".join([record] * 4000) + '\n"never closed\n', encoding="utf-8")
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, logger="spanseek.indexer.spreadsheet"):
            ext = extract_file(tmp_path / "big.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ext.paragraphs) == 1 and "sheet 'big' from row 3 on" in caplog.text  # (row 1 names the columns)
    assert peak < 16 << 20, peak  # the text (1.7 MB) and its copies to read it; all the records took 39 MiB


@pytest.mark.slow
def test_a_huge_shared_strings_table_is_streamed(tmp_path):
    """A workbook of some hundred KB whose shared strings are 3.4 million (60 MiB of XML, under the size past which a part's
    compression counts as a bomb) took 1.5 GB as one tree; read in a process capped at 600 MB, it is read."""
    import subprocess
    import sys

    path = write_xlsx(tmp_path / "s.xlsx", {"S": '<row r="1"><c r="A1" t="s"><v>1</v></c></row>'}, ())
    with zipfile.ZipFile(path) as z:
        parts = {name: z.read(name) for name in z.namelist() if name != "xl/sharedStrings.xml"}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
        z.writestr("xl/sharedStrings.xml", f"<sst {MAIN}>" + "<si><t>a</t></si><si><t>Tea</t></si>" * 1_700_000
                   + "</sst>")
    script = ("import sys; from pathlib import Path; from spanseek.indexer.read_process import cap_memory; "
              "from spanseek.indexer.spreadsheet import extract_xlsx; cap_memory(600 << 20); "
              "print(extract_xlsx(Path(sys.argv[1])).paragraphs)")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "['Tea']", done.stderr[-500:]


def test_damaged_renamed_and_hostile_workbooks_are_named_with_what_is_wrong(tmp_path):
    def why(path: Path) -> str:
        with pytest.raises(Unreadable) as e:
            extract_xlsx(path)
        return str(e.value)

    broken = write_xlsx(tmp_path / "broken.xlsx", {"S": '<row r="1"><c t="s"><v>4</v></c></row><row><oops'}, ())
    assert why(broken).startswith("not a readable Excel workbook (.xlsx) file: its part xl/worksheets/sheet1.xml is "
                                  "not well-formed XML (")
    (tmp_path / "cut.xlsx").write_bytes(write_xlsx(tmp_path / "whole.xlsx").read_bytes()[:400])
    assert "truncated or damaged" in why(tmp_path / "cut.xlsx")
    word = tmp_path / "word.xlsx"
    with zipfile.ZipFile(word, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", "<document/>")
    assert why(word) == "a Word file, not an Excel workbook (.xlsx) file; rename it to .docx"
    ods = write_odt(tmp_path / "ods.xlsx", content=ods_content(ODS_TABLES),
                    mimetype="application/vnd.oasis.opendocument.spreadsheet")
    assert why(ods) == "an OpenDocument spreadsheet (.ods), not an Excel workbook (.xlsx) file; rename it to .ods"
    laughs = ('<!DOCTYPE lolz [<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">' for i in range(10)) + "]>")
    start = time.process_time()
    bomb = write_xlsx(tmp_path / "laughs.xlsx", {"S": '<row><c t="inlineStr"><is><t>Tea &lol9;</t></is></c></row>'},
                      (), head=laughs)
    assert "its part xl/worksheets/sheet1.xml is not well-formed XML (Maximum entity amplification" in why(bomb)
    assert time.process_time() - start < 1
    zipped = write_xlsx(tmp_path / "zbomb.xlsx", {"S": "<row/>" + " " * (80 << 20)}, ())
    assert why(zipped).startswith("a zip bomb: its part xl/worksheets/sheet1.xml expands from")
    (tmp_path / "old.xls").write_bytes(b"\xd0\xcf\x11\xe0" + b"\0" * 100)
    with pytest.raises(IngestError, match=r"an old Excel \(.xls\) file, which from-files does not read"):
        from_files([tmp_path / "old.xls"], tmp_path / "c.jsonl")


def test_a_folder_of_mixed_files_reads_each_with_sheet_and_row_metadata(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_xlsx(folder / "prices.xlsx")
    write_odt(folder / "stock.ods", content=ods_content(ODS_TABLES),
              mimetype="application/vnd.oasis.opendocument.spreadsheet")
    (folder / "tides.csv").write_text("Port,High tide\nKirkwall,06:10\n", encoding="utf-8")
    (folder / "readme.md").write_text("# Stores\n\nPrices and stock of the harbour shop.\n", encoding="utf-8")
    (folder / "old.xls").write_bytes(b"\xd0\xcf\x11\xe0")
    report = from_files([folder], tmp_path / "c.jsonl", opts=IngestOptions())
    docs = {doc.id: doc for doc in read_corpus(tmp_path / "c.jsonl")}
    assert sorted(docs) == ["prices.xlsx", "readme.md", "stock.ods", "tides.csv"]
    assert report.skipped == [(str(folder / "old.xls"), report.skipped[0][1])]
    assert docs["tides.csv"].paragraphs == ("Port: Kirkwall; High tide: 06:10",)
    assert docs["tides.csv"].passage_meta == ({"sheet": "tides", "row": 2},)
    assert [m["row"] for m in docs["prices.xlsx"].passage_meta] == [2, 5, 2]
    assert docs["prices.xlsx"].meta["sheets"] == 2 and docs["stock.ods"].passage_meta[0]["sheet"] == "Stock"
