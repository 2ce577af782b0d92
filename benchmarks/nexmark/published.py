"""Published Nexmark figures of other engines, per query, in events/s per core (other machines).

Each figure is copied from its source as published, or divided by the
cores the source names (said below); none was measured here, and none is
comparable to a figure of this repository except as a scale: other
machines, other generators, other sinks and state backends.

``FLINK``
    The Nexmark repository's result table (``github.com/nexmark/nexmark``,
    ``README.md`` from commit ``8ff9866`` of 2021-05-31; ``GUIDE_V1.md`` at
    ``6b3646c``): Flink 1.13, 3 workers of 8 cores and 32 GB, parallelism 8,
    RocksDB with incremental checkpoints every 3 min, mini-batch on,
    100 million events from Nexmark's generator into a blackhole sink. Its
    column ``Throughput/Cores`` is published per core: events / (cores
    measured x time), 8 to 21 cores measured. q6 is not supported by Flink.
``RISINGWAVE``
    RisingWave's documentation, "Stream processing benchmarks: Nexmark
    results" (``docs.risingwave.com/get-started/rw-benchmarks-stream-processing``;
    ``risingwavelabs/risingwave-docs`` at ``747f1f6``): one node of 8 vCPUs
    and 16 GB, S3 storage, input JSON from Kafka; ``Throughput/core`` as
    published (throughput over the compute and compactor CPU measured). No
    figure for q6, q11, q12, q13, q19.
``FELDERA``
    Feldera's ``benchmark/README.md``, "16-core Nexmark Streaming
    Performance" (``feldera/feldera``, commit ``1eb7bb0`` of 2024-04-18):
    total events/s of its Rust engine over 100 million events, divided here
    by the 16 cores it names (the machine is not described). No figure for
    q10, q11.
"""

from __future__ import annotations

#: The Nexmark repository's Flink 1.13 table, ``Throughput/Cores`` (events/s per core).
FLINK: dict[str, float] = {
    "q0": 155_020,
    "q1": 157_940,
    "q2": 175_210,
    "q3": 152_120,
    "q4": 34_330,
    "q5": 22_140,
    "q7": 12_330,
    "q8": 146_140,
    "q9": 14_240,
    "q10": 57_810,
    "q11": 39_700,
    "q12": 75_670,
    "q13": 130_730,
    "q14": 161_230,
    "q15": 72_420,
    "q16": 18_650,
    "q17": 116_800,
    "q18": 53_700,
    "q19": 44_040,
    "q20": 18_980,
    "q21": 98_490,
    "q22": 129_960,
}

#: RisingWave's documentation, ``Throughput/core`` (published in thousands of rows/s).
RISINGWAVE: dict[str, float] = {
    "q0": 118_410,
    "q1": 119_370,
    "q2": 127_360,
    "q3": 97_358,
    "q4": 13_923,
    "q5": 5_224.9,
    "q7": 20_348,
    "q8": 60_732,
    "q9": 8_220.8,
    "q10": 106_150,
    "q14": 45_371,
    "q15": 78_525,
    "q16": 8_056.5,
    "q17": 17_314,
    "q18": 9_845.5,
    "q20": 12_726,
    "q21": 89_377,
    "q22": 110_500,
}

#: Feldera's 16-core table: total events/s as published.
FELDERA_TOTAL: dict[str, float] = {
    "q0": 6_973_987,
    "q1": 6_595_871,
    "q2": 6_748_549,
    "q3": 6_608_075,
    "q4": 4_233_521,
    "q5": 6_589_786,
    "q6": 3_997_921,
    "q7": 3_136_763,
    "q8": 6_641_870,
    "q9": 910_680,
    "q12": 6_682_259,
    "q13": 3_675_255,
    "q14": 6_858_711,
    "q15": 3_539_322,
    "q16": 810_701,
    "q17": 3_870_269,
    "q18": 1_358_216,
    "q19": 1_201_216,
    "q20": 1_352_192,
    "q21": 6_634_820,
    "q22": 6_305_568,
}
FELDERA_CORES = 16
#: Feldera's figures per core (its total over the 16 cores it names).
FELDERA: dict[str, float] = {q: total / FELDERA_CORES for q, total in FELDERA_TOTAL.items()}

#: Each engine's figures, by the name the table gives it.
PUBLISHED: dict[str, dict[str, float]] = {"Flink": FLINK, "RisingWave": RISINGWAVE, "Feldera": FELDERA}
