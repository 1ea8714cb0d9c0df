"""The report's shape heading names the shape, also when an imported entry is left out (the
entry's label goes in the note, not in the heading)."""

from api.report import ReportRow, ShapeReport, _shape_section
from tuner.files.merge import dense_key


def test_heading_names_the_shape_when_an_import_is_left_out():
    shape = ShapeReport(
        key=dense_key(256, 384, (128, 128)),
        m_requested=(16,),
        rows=(
            ReportRow(
                M=16, config=None, latency_us=None, default_latency_us=None, is_default=False
            ),
        ),
        models=("tiny",),
        left_out=((16, "shipped L20", "needs 300 KiB"),),
    )
    html = _shape_section(shape, "bfloat16", cpu=False, ceilings={})
    assert html.startswith(
        '<section class="shape" id="shape-256x384"><h2>N=256, K=384, '
        "block_shape [128, 128] (tiny)</h2>"
    )
    assert (
        "M=16: entry imported from &#x27;shipped L20&#x27; left out, it cannot launch on "
        "this device: needs 300 KiB."
    ) in html
