"""Open a generated HTML report in headless Chromium: no console errors, SVG plots in the DOM.

Skipped only when no chromium binary is installed (.ci/run installs Debian's).
"""

import shutil
import subprocess

import pytest
from report_runs import document, failing

from specaudit.reports import html
from specaudit.results.document import from_document

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does it)")

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0",
]


def chromium(tmp_path, page, *extra):
    """Run headless Chromium on ``page`` with a fresh profile; return (stdout, console lines)."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    proc = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # with --enable-logging, every console message (errors, uncaught exceptions, failed loads) is an INFO:CONSOLE line
    return proc.stdout, [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]


def test_console_detector_sees_errors(tmp_path):
    # control: the detector must catch a page that does log errors, or the real test proves nothing
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom'); undefinedFunction();</script>")
    _, console = chromium(tmp_path, page, "--dump-dom")
    assert any("boom" in ln for ln in console) and any("undefinedFunction" in ln for ln in console)


def test_report_renders_in_chromium_without_console_errors(tmp_path):
    # the failing run, one scenario renamed to what mathtext would have typeset (or crashed on)
    doc = document(failing())
    doc["scenarios"][0]["name"] = "$\\foo{$ <i>x</i>"
    page = tmp_path / "report.html"
    page.write_text(html.render(from_document(doc)), encoding="utf-8")
    dom, console = chromium(tmp_path, page, "--dump-dom")
    assert console == []
    # the rendered DOM holds the inline SVG plots, the reproduce line and the grouped diagnosis
    assert dom.count("<svg") >= 8 and 'id="plot-pvalues"' in dom and 'id="reproduce"' in dom
    assert dom.count("looks like: <strong>resample_from_p</strong>") == 1 + 2  # summary once, then each card
    assert "$\\foo{$ &lt;i&gt;x&lt;/i&gt; / joint-law</text>" in dom and "<i>x</i>" not in dom
    shot = tmp_path / "report.png"
    chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1280,2400", "--hide-scrollbars")
    assert shot.stat().st_size > 20_000  # a real page, not a blank image
