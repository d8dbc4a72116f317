import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_annotated_tag():
    assert git("cat-file", "-t", "v1.0").strip() == "tag"
    assert git("tag", "-l", "--format=%(contents:subject)", "v1.0").strip() == "Release 1.0"
    assert git("rev-parse", "v1.0^{commit}") == git("rev-parse", "HEAD")
