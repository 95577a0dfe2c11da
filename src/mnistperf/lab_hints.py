"""The advice in the lab's own terms: its stage configs and options, for the diagnosis of its own runs.

What the diagnosis suggests to anyone (:data:`~mnistperf.diagnosis.record.advice.USER_HINTS`), named as the lab's
configs name it, with the stage that demonstrates each. Every stage config names these for its EpochTimer
(``hints: mnistperf.lab_hints.LAB_HINTS``), and the bench's reference rows hand them to their clock.
"""

from __future__ import annotations

from mnistperf.diagnosis.record.advice import WORKERS
from mnistperf.diagnosis.record.project_terms import KEEPS_PACE

LARGER_BATCH = "a larger batch (data.batch_size, as stage v1_bs512 raised v1_naive's)"
LAB_HINTS: dict[str, list[str]] = {
    "input-bound": [
        "more loader workers (data.num_workers; stage v1_workers4)",
        "the per-item work done once in setup instead of per item (data.pipeline v2; stage v2_pinned)",
        "the data resident on the device (data.pipeline resident; stage v3_resident)",
        "`mnistperf tune`, which measures the lab's pipelines on this machine",
    ],
    WORKERS: [
        "the per-item work done once in setup instead of per item (data.pipeline v2; stage v2_pinned)",
        f"fewer loader workers (data.num_workers), {KEEPS_PACE}",
        "`mnistperf tune`, which measures the lab's pipelines on this machine",
    ],
    "overhead-bound": [
        "the whole step as one CUDA graph (model.cuda_graph; stage v4_graphed)",
        LARGER_BATCH,
        "no per-step self.log or .item(): sums kept on the device, logged once per epoch (every stage)",
    ],
    "compute-bound": [
        "bf16 mixed precision and channels_last (trainer.precision bf16-mixed, model.channels_last; stage v3_compiled)",
        "a larger GPU",
    ],
    "compute-bound on a CPU": [
        "torch's threads matched to the cores this process may use ({threads})",
        LARGER_BATCH,
        # no torch.compile: on the lab's CPU it cost more than it saved on every run (docs/stages.md, v3_compiled)
        "a GPU (trainer.accelerator cuda), once the model is large enough to fill one",
    ],
    "overhead-bound on a CPU": [
        LARGER_BATCH,
        "a GPU, where the step's small operations run as one CUDA graph (trainer.accelerator cuda; stage v4_graphed)",
    ],
}
