"""The example notebooks run in a Jupyter kernel: rich displays, a timeline picture, no stack traces.

The notebooks run in one kernel, one after the other, so the suite starts one
kernel and one JVM for them: the first notebook's ``Session.embedded()``
starts Spark quietly, the second's starts a new SparkContext on that JVM.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).parent.parent / "examples" / "notebooks"
#: What never belongs on a notebook's screen: Java and Py4J traces, Spark's log lines, JVM warnings.
NOISE = ("\tat ", "at org.apache", "py4j", "Py4J", "WARNING: Using incubator", " ERROR ", "Traceback")


Run = Callable[[str], Any]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Execute a notebook in the module's kernel (started by the first call) and return it."""
    tmp_path = tmp_path_factory.mktemp("notebooks")
    env = {**os.environ, "KRISHIV_LOG_DIR": str(tmp_path / "logs")}
    env.pop("KRISHIV_VERBOSE", None)
    kernel = KernelManager(kernel_name="python3")

    def execute(name: str) -> Any:
        notebook = nbformat.read(NOTEBOOKS / name, as_version=4)  # type: ignore[no-untyped-call]
        client = NotebookClient(
            notebook, timeout=600, km=kernel, resources={"metadata": {"path": str(tmp_path)}}
        )
        client.execute(env=env)  # the kernel runs in a process of its own, with this environment
        return notebook

    yield execute
    if kernel.has_kernel:
        kernel.shutdown_kernel(now=True)


def outputs(notebook: Any) -> list[tuple[int, Any]]:
    return [
        (i, out) for i, cell in enumerate(notebook.cells) if cell.cell_type == "code" for out in cell.outputs
    ]


def assert_quiet(notebook: Any) -> None:
    for i, out in outputs(notebook):
        if out.output_type == "stream" and out.name == "stderr":
            raise AssertionError(f"cell {i} wrote to stderr: {out.text[:500]}")
        text = out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
        bad = [n for n in NOISE if n in text]
        assert not bad, f"cell {i} shows {bad}: {text[:500]}"


@pytest.mark.spark
def test_quickstart_notebook_shows_rich_displays_and_a_timeline(run: Run) -> None:
    notebook = run("quickstart.ipynb")
    assert_quiet(notebook)
    html = "\n".join(
        out.data["text/html"] for _, out in outputs(notebook) if "text/html" in out.get("data", {})
    )
    for title in (
        "krishiv_py Session",
        "Schema (3 columns)",
        "WindowAggregate",
        "krishiv_py StreamingJob",
        "krishiv_py JobMetrics",
        "Watermark advice",
        "differing_windows",
    ):
        assert title in html, title
    assert "2024-01-01 00:01:00 UTC" in html  # result tables: window bounds as times
    assert "retract" in html  # the join section: a late view withdrew bob's padded row
    assert "finished" in html and "end of input" in html
    pngs = [out for _, out in outputs(notebook) if "image/png" in out.get("data", {})]
    assert len(pngs) == 1  # the timeline, shown once
    printed = "".join(out.text for _, out in outputs(notebook) if out.output_type == "stream")
    shown = [
        out.data["text/plain"]
        for _, out in outputs(notebook)
        if out.output_type == "execute_result" and "== Lowering: native ==" in out.data.get("text/plain", "")
    ]
    assert len(shown) == 1 and "\\n" not in shown[0]  # explain() returns its text, shown once as itself
    assert "== Lowering: native ==" not in printed  # ... and prints nothing


@pytest.mark.spark
def test_a_failing_job_cell_shows_krishivs_error_and_nothing_else(run: Run) -> None:
    notebook = run("failing_job.ipynb")
    assert_quiet(notebook)
    errors = [(i, out) for i, out in outputs(notebook) if out.output_type == "error"]
    assert [out.ename for _, out in errors] == ["JobError", "JobStoppedError"]
    failing = notebook.cells[errors[0][0]]
    assert len(failing.outputs) == 1  # the error and nothing else
    assert "warehouse unreachable" in errors[0][1].evalue
    html = "\n".join(
        out.data["text/html"] for _, out in outputs(notebook) if "text/html" in out.get("data", {})
    )
    assert "failed" in html and "invalid_events" in html and "arithmetic_errors" in html


@pytest.mark.spark
def test_the_newcomers_pipeline_notebook_corrects_an_hour_and_has_a_one_query_sql_form(run: Run) -> None:
    """Impressions joined with clicks, counted per campaign and hour into DuckDB: a late impression
    (within the join's and the window's minute) corrects C1's hour in the table; the SQL query with
    ``SET join.*`` and ``SET window.*`` is the builder's plan."""
    notebook = run("clicks_per_campaign.ipynb")
    assert_quiet(notebook)
    assert not [out for _, out in outputs(notebook) if out.output_type == "error"]
    texts = [
        out.get("text", "") + str(out.get("data", {}).get("text/plain", "")) for _, out in outputs(notebook)
    ]
    assert any("fired: [('C1', 1), ('C2', 1)]" in t for t in texts), texts  # the hour, on time
    assert "[('C1', '09:00', 2), ('C2', '09:00', 1)]" in texts, texts  # C1 corrected in place
    assert any("the same plan as the builder's: True" in t for t in texts), texts
