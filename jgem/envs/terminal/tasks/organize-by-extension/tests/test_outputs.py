from pathlib import Path

INBOX = Path("/app/inbox")


def test_layout():
    got = sorted(str(p.relative_to(INBOX)) for p in INBOX.rglob("*") if p.is_file())
    assert got == [
        "csv/old.csv",
        "csv/table.csv",
        "log/app.log",
        "log/server.log",
        "txt/notes.txt",
        "txt/report.txt",
        "txt/todo.txt",
    ]


def test_contents_kept():
    assert (INBOX / "log" / "app.log").read_text() == "app.log\n"
