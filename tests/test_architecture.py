"""The layering (docs/architecture.md): who may import whom, and a sink that is one class.

The import rules are read from the source with ``ast``: every import counts,
at module level, under ``TYPE_CHECKING`` or inside a function.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.plan import nodes as n
from krishiv_py.sinks import SinkContext
from krishiv_py.types import to_schema

PACKAGE = Path(kp.__file__).parent


def module_name(path: Path) -> str:
    parts = ("krishiv_py", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> dict[str, int]:
    """Every ``krishiv_py`` module ``path`` imports, wherever the statement stands: module -> line."""
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rsplit(".", 1)[0]
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names = [module, *(f"{module}.{a.name}" for a in node.names if is_module(f"{module}.{a.name}"))]
        else:
            continue
        for name in names:
            if name == "krishiv_py" or name.startswith("krishiv_py."):
                while not is_module(name):  # a name imported from a module: the module
                    name = name.rsplit(".", 1)[0]
                if name != own:
                    out.setdefault(name, node.lineno)
    return out


def is_module(name: str) -> bool:
    """``name`` is a module or package of krishiv_py (``from pkg import module``), not a name in one."""
    parts = name.split(".")[1:]
    where = PACKAGE.joinpath(*parts) if parts else PACKAGE
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def import_graph() -> dict[str, dict[str, int]]:
    """Module -> the krishiv_py modules it imports (every import statement of every module)."""
    return {module_name(p): imported_modules(p) for p in sorted(PACKAGE.rglob("*.py"))}


#: The floors of the house, lowest first (docs/architecture.md): a module imports only
#: modules of its own floor or the floors beneath it.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "names", "_typing", "panes", "files")),
    ("plan", ("types", "expr", "plan", "_display")),
    ("kernels", ("stateful",)),
    ("model", ("model",)),
    ("planner", ("planner",)),
    ("outputs", ("checkpoint", "spark_errors", "sinks", "late", "metrics", "tables")),
    ("advice", ("advice",)),
    ("runtime", ("runtime",)),
    ("connectors", ("kafka",)),
    ("builder", ("api",)),
    ("front door", ("sql", "sender", "session", "viz")),
    ("tools", ("testing", "demo", "cli", "devtools", "__init__")),
)

#: Imports allowed to run upward, each with its reason: none (a job draws its timeline with the
#: plotter its session hands it).
UPWARD_ALLOWED: set[tuple[str, str]] = set()

#: Modules that may name each other: the builder's typed chain Stream -> KeyedStream -> WindowedStream,
#: for type annotations only (a keyed or windowed stream makes its results through the stream it holds).
CIRCLE_ALLOWED = frozenset(
    {"krishiv_py.api.stream", "krishiv_py.api.keyed", "krishiv_py.api.windowed", "krishiv_py.api.over"}
)


def floor_of(module: str) -> int:
    if module == "krishiv_py":
        return len(FLOORS) - 1
    name = module.removeprefix("krishiv_py.")
    for i, (_, prefixes) in enumerate(FLOORS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} stands on no floor: add it to FLOORS (and docs/architecture.md)")


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected parts of two modules or more (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_reader_sees_imports_inside_functions_and_type_checking() -> None:
    assert "krishiv_py.runtime.handle" in imported_modules(PACKAGE / "runtime" / "engine.py")  # TYPE_CHECKING
    assert "krishiv_py.advice" in imported_modules(PACKAGE / "runtime" / "handle.py")  # in a function


def test_the_circle_finder_finds_a_circle_at_any_depth() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_circle_at_any_depth() -> None:
    found = [c for c in circles(import_graph()) if not set(c) <= CIRCLE_ALLOWED]
    assert found == []


def test_every_import_points_down_a_floor_or_stays_on_its_own() -> None:
    up = []
    for module, imports in import_graph().items():
        for target, line in imports.items():
            if floor_of(target) > floor_of(module) and (module, target) not in UPWARD_ALLOWED:
                up.append(
                    f"{module} ({FLOORS[floor_of(module)][0]}) imports {target} "
                    f"({FLOORS[floor_of(target)][0]}) at line {line}"
                )
    assert up == []


def test_the_allowed_upward_imports_exist() -> None:
    graph = import_graph()
    assert all(target in graph[module] for module, target in UPWARD_ALLOWED)


def test_the_builders_circle_is_one_of_annotations_only() -> None:
    """``api/keyed.py`` and ``api/windowed.py`` name ``Stream`` only under ``TYPE_CHECKING``: no import
    of the stream module runs when they do."""
    for name in ("keyed", "windowed"):
        tree = ast.parse((PACKAGE / "api" / f"{name}.py").read_text(encoding="utf-8"))
        checking = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ]
        guarded = {id(inner) for node in checking for inner in ast.walk(node)}
        run = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module == "krishiv_py.api.stream"
            and id(node) not in guarded
        ]
        assert run == [], (name, run)


def string_constants(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path`` that are not docstrings: (line, value)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


#: What a job's checkpoint holds, by name: only ``krishiv_py/checkpoint.py`` writes these names.
CHECKPOINT_NAMES = frozenset(
    {
        "offsets",
        "commits",
        "krishiv-idle",
        "krishiv-ticks",
        "krishiv-handoff",
        "krishiv-plan.txt",
        "krishiv-buckets.txt",
    }
)


def test_the_checkpoint_layout_is_the_one_module_that_names_a_checkpoint_path() -> None:
    found = [
        f"{p.relative_to(PACKAGE)}:{line}: {value!r}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != PACKAGE / "checkpoint.py"
        for line, value in string_constants(p)
        if value in CHECKPOINT_NAMES
    ]
    assert found == []


#: The checkpoint's free log readers, each a layout's method on a path string: outside
#: ``checkpoint.py`` a job reads its logs through its layout.
CHECKPOINT_READERS = frozenset({"committed_batch", "source_offsets", "batch_watermark_ms"})


def test_no_module_reads_a_checkpoints_logs_around_its_layout() -> None:
    # A path-name literal is not the only way around the layout: a free reader handed a
    # directory string joins the names itself (the map tasks' watermark once read it so).
    found = [
        f"{p.relative_to(PACKAGE)}:{node.lineno}: {alias.name}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != PACKAGE / "checkpoint.py"
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == "krishiv_py.checkpoint"
        for alias in node.names
        if alias.name in CHECKPOINT_READERS
    ]
    assert found == []


#: Where a ``CheckpointLayout`` may be made from a directory, each with its reason: a job's
#: layout is made once at launch and handed down.
LAYOUT_MADE = {
    ("runtime/launch.py", "start_streaming_job"),  # the job's one layout, at launch
    ("runtime/launch.py", None),  # the record files' names (PLAN_FILE, BUCKETS_FILE)
    ("sinks.py", "checkpoint"),  # SinkContext.checkpoint: a context names its job's directory
    ("runtime/spool.py", "_committed_seq"),  # a reader of any process, named in its registration
    ("viz.py", "_source_batches"),  # a timeline replays a job from the directory it reports
    ("runtime/state_view.py", "_check"),  # a look inside a checkpoint named by the user, job stopped
}


def layouts_made(path: Path) -> list[tuple[str | None, int]]:
    """Each ``CheckpointLayout(...)`` call in ``path``: (the function it stands in, line)."""
    found: list[tuple[str | None, int]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and getattr(child.func, "id", None) == "CheckpointLayout":
                found.append((function, child.lineno))
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def test_a_jobs_checkpoint_layout_is_made_once_at_launch_and_handed_down() -> None:
    made = {
        (str(p.relative_to(PACKAGE)), function): line
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != PACKAGE / "checkpoint.py"
        for function, line in layouts_made(p)
    }
    assert [
        f"{where}:{line} in {function}"
        for (where, function), line in made.items()
        if (where, function) not in LAYOUT_MADE
    ] == []
    assert set(made) == LAYOUT_MADE  # each allowance still needed


def test_the_job_handle_reaches_no_job_and_nothing_above_the_runtime_floor() -> None:
    graph, reached, todo = import_graph(), set(), ["krishiv_py.runtime.handle"]
    while todo:
        for target in graph.get(todo.pop(), {}):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    runtime = FLOORS.index(("runtime", ("runtime",)))
    assert [m for m in sorted(reached) if floor_of(m) > runtime] == []
    assert {m for m in reached if floor_of(m) == runtime} == {
        "krishiv_py.runtime.metrics_endpoint",
        "krishiv_py.runtime.output",
        "krishiv_py.runtime.quarantine",
    }


def test_the_checkpoint_layout_names_what_it_is_checked_against() -> None:
    from krishiv_py.checkpoint import CheckpointLayout

    layout = CheckpointLayout("/ckpt")
    paths = {
        getattr(layout, a)
        for a in dir(CheckpointLayout)
        if isinstance(getattr(CheckpointLayout, a), property)
    }
    assert {os.path.basename(p) for p in paths} >= CHECKPOINT_NAMES
    assert all(p.startswith("/ckpt/") for p in paths)


def test_the_runtime_never_asks_which_sink_it_has() -> None:
    asks = []
    for p in sorted((PACKAGE / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "isinstance"
                and len(node.args) == 2
            ):
                named = [
                    getattr(n_, "id", None) or getattr(n_, "attr", None) for n_ in ast.walk(node.args[1])
                ]
                asks += [
                    f"{p.relative_to(PACKAGE)}:{node.lineno}" for name in named if name and "Sink" in name
                ]
    assert asks == []


#: Plan node classes of operators and of the steps around them (a node class the planner asks
#: about instead of the analysed plan or the kind's descriptor).
_NODE_KINDS = {
    "Watermark", "Filter", "Project", "Union", "WindowAggregate", "KeyedAggregate", "KeyedTopN",
    "TopN", "Join", "LookupJoin", "Cascade", "OverAggregate",
}  # fmt: skip


def _kind_checks(folder: Path) -> list[str]:
    """Each ``isinstance`` under ``folder`` that names a plan node class, as ``file:function``."""
    found = []
    for p in sorted(folder.rglob("*.py")):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                    named = {
                        getattr(x, "attr", None) or getattr(x, "id", None) for x in ast.walk(node.args[1])
                    }
                    if named & _NODE_KINDS:
                        found.append(f"{p.name}:{fn.name}")
    return sorted(found)


def test_the_planner_asks_a_nodes_class_only_where_it_branches_on_the_plans_shape() -> None:
    """The planner reads what it needs of an operator from its kind's descriptor and the analysed
    plan (docs/architecture.md); what is left: the native lowering's top-N on the driver, a window
    top-N's place, the reason of a join of two windows, a lookup join in a reason and the sliding
    panes' source check."""
    assert _kind_checks(PACKAGE / "planner") == [
        "choose.py:_stateless_why",
        "lower.py:_check_window_top_n",
        "lower.py:_join_reasons",
        "lower.py:_operator_and_stages",
        "lower.py:_per_batch_chain",
        "lower.py:_ranked_stages",
        "sliding.py:stream_pane_choice",
    ]


def test_a_stream_without_an_engine_is_a_plan_that_cannot_run() -> None:
    schema = to_schema("k string, t bigint")
    stream = Stream(None, n.MemorySource(name="in", schema=schema, path="/data/in"))
    per_10 = stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")))
    assert per_10.lower().lowering == "native"  # planning needs no engine
    for run in (per_10.collect, per_10.start, per_10.to_spark, per_10.explain):
        with pytest.raises(kp.SessionError, match="plan without an engine"):
            run()


# --- a sink of one's own: one class, no edit in the runtime ---------------------------------


class LatestPerBatch:
    """A test-only sink: keeps each micro-batch's rows by batch id (a rerun replaces them)."""

    def __init__(self) -> None:
        self.contexts: list[SinkContext] = []
        self.batches: dict[int, pa.Table] = {}

    def open(self, context: SinkContext) -> LatestPerBatch:
        self.contexts.append(context)
        return self

    def write(self, table: pa.Table, batch_id: int) -> None:
        self.batches[batch_id] = table

    def results(self) -> pa.Table:
        return pa.concat_tables([self.batches[b] for b in sorted(self.batches)])


class Refuses:
    """A test-only sink whose writer raises on every batch that has rows."""

    def open(self, context: SinkContext) -> Refuses:
        return self

    def write(self, table: pa.Table, batch_id: int) -> None:
        if table.num_rows:
            raise ConnectionError("the table is read-only")


SCHEMA = "k string, t bigint, v bigint"


def per_10(stream: kp.Stream) -> kp.Stream:
    return stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.sum(kp.col("v")))


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((r["k"], r["window_start"].timestamp(), r["sum_v"]) for r in table.to_pylist())


@pytest.mark.spark
@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_a_sink_of_ones_own_gets_every_micro_batch(session: kp.Session, lowering: Any) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    sink = LatestPerBatch()
    job = per_10(stream).start(sink, lowering=lowering)
    try:
        sender.send([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 5, "v": 2}, {"k": "b", "t": 12, "v": 4}])
        job.process_all_available()
        sender.send([{"k": "b", "t": 25, "v": 8}])
        job.process_all_available()
        [context] = sink.contexts
        assert context.output == "results" and context.checkpoint_dir == job.checkpoint_dir
        assert context.schema.names == ("k", "window_start", "window_end", "sum_v")
        assert rows_of(job.results()) == [("a", 0.0, 3), ("b", 0.01, 4)]
        assert job.results().num_rows == sum(t.num_rows for t in sink.batches.values())
    finally:
        job.stop()


@pytest.mark.spark
def test_a_sink_of_ones_own_in_a_bounded_run_is_one_batch(session: kp.Session) -> None:
    sink = LatestPerBatch()
    stream = session.from_records([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 15, "v": 2}], SCHEMA)
    job = per_10(stream).start(sink)
    assert list(sink.batches) == [0] and sink.contexts[0].bounded
    assert rows_of(job.results()) == [("a", 0.0, 1), ("a", 0.01, 2)]


@pytest.mark.spark
def test_a_sink_of_ones_own_is_user_code_failures_name_it_and_can_be_quarantined(
    session: kp.Session, tmp_path: Path
) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = per_10(stream).start(Refuses())
    sender.send([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 15, "v": 2}])
    with pytest.raises(kp.JobError, match="the sink writer Refuses raised on batch"):
        job.process_all_available()
    job.stop()

    stream, sender = session.memory_stream(SCHEMA)
    job = per_10(stream).start(Refuses(), quarantine_dir=str(tmp_path / "q"))
    try:
        sender.send([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 15, "v": 2}])
        job.process_all_available()
        metrics = job.metrics()
        assert (metrics.quarantined_batches, metrics.quarantined_rows) == (1, 1)
        with pytest.raises(kp.NoResultsError, match="Refuses, which keeps no rows"):
            job.results()
    finally:
        job.stop()


# --- a source kind of one's own: a node class, a read rule, a reader --------------------------


class RangeSource(n.RecordsSource):
    """A test-only bounded source: ``count`` rows ``k='r', t=0..count-1``, generated by Spark."""


class Unregistered(n.RecordsSource):
    """A source node type nothing knows how to read."""


class RangeRule:
    punctuated = False

    def read(self, node: RangeSource, *, streaming: bool) -> Any:
        from krishiv_py.planner.spark.recipe import ReadSource

        count = str(node.data.num_rows)
        return ReadSource(
            name=node.name,
            kind="test-range",
            schema=node.schema,
            streaming=False,
            options=(("count", count),),
        )


class RangeReader:
    batch_sql = True

    def read(self, spark: Any, node: Any, paths: Any) -> Any:
        count = int(dict(node.options)["count"])
        return spark.range(count).selectExpr(
            "'r' AS k",
            "id AS t",
            "CAST(0 AS TINYINT) AS __kp_kind",
            "CAST(NULL AS BIGINT) AS __kp_wm",
            "id AS __kp_seq",
        )


def test_an_unknown_source_kind_or_node_type_is_a_plan_error() -> None:
    from krishiv_py.planner.spark.sources import read_rule
    from krishiv_py.runtime.sources import reader_for

    with pytest.raises(kp.PlanError, match="no reader for sources of kind 'nope'; known kinds: files, "):
        reader_for("nope")
    with pytest.raises(kp.PlanError, match="no read rule for sources of type Unregistered"):
        read_rule(Unregistered(name="x", schema=to_schema("k string"), data=pa.table({"k": ["a"]})))


@pytest.mark.spark
def test_a_source_kind_of_ones_own_runs_without_edits_to_the_planner_or_runtime(session: kp.Session) -> None:
    from krishiv_py.planner.spark.sources import register_read_rule
    from krishiv_py.runtime.sources import register_reader

    register_read_rule(RangeSource, RangeRule())
    register_reader("test-range", RangeReader())
    schema = to_schema("k string, t bigint")
    placeholder = pa.table({"k": ["r"] * 25, "t": list(range(25))})  # only its row count is read
    stream = Stream(session.engine, RangeSource(name="range", schema=schema, data=placeholder))
    per_10 = stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")))
    rows = sorted((r["window_start"].timestamp(), r["count"]) for r in per_10.collect().to_pylist())
    assert rows == [(0.0, 10), (0.01, 10), (0.02, 5)]
    assert "test-range" in per_10.explain(show=False)
