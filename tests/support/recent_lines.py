"""Real lines of today's frameworks, launchers and drivers, as published, with the fields each carries.

Issue 32's corpus: lines quoted in public issue trackers (``owner/repo#N``: the issue or pull request
that quotes it) and in peers' test fixtures (``owner/repo:path``: a file of another project that tests
its own parser on them), for PyTorch 2.x, vLLM V0/V1, JAX/XLA, TensorFlow, NCCL 2.1x-2.2x, DeepSpeed,
torchrun and Ray workloads, and NVIDIA driver 535-590 ``NVRM`` output. Each :class:`Line` names where
it was published, the version that printed it (as the source states it, else the wording's era), its
text (the source's own bytes; where the source wrapped or cut a line, ``adapted`` says what was
joined or left out) and the signals the parsers must read from it with the fields it carries
(``(kind, {field: value})``, in the order the parsers return them; none for the negative corpus).

Log lines go through :func:`forensics.parsing.logsignals.scan.scan_log`; kernel lines (``KERNEL``)
through :func:`forensics.parsing.nvrm.parse_xid` as a kmsg record's message, kind ``xid``. The
table-driven test is ``tests/unit/parsing/test_recent_lines.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["KERNEL", "KERNEL_NEGATIVE", "LOG", "NEGATIVE", "Line"]

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class Line:
    source: str
    version: str
    text: str
    signals: tuple[tuple[str, dict[str, Any]], ...] = field(default=())
    adapted: str = ""


def _oom(**fields: Any) -> tuple[str, dict[str, Any]]:
    return ("cuda-oom", fields)


def _fault(**fields: Any) -> tuple[str, dict[str, Any]]:
    return ("cuda-fault", fields)


def _end(**fields: Any) -> tuple[str, dict[str, Any]]:
    return ("process-end", fields)


def _xid(**fields: Any) -> tuple[str, dict[str, Any]]:
    return ("xid", fields)


def _warn(**fields: Any) -> tuple[str, dict[str, Any]]:
    return ("nccl-warn", fields)


def _pyt(requested: float, unit: int, device: int, total: float, free: float | None = None, *,
         used: float | None = None, allocated: float | None = None, unalloc: float | None = None,
         pools: float | None = None, units: tuple[int, ...] = (),
         others: tuple[tuple[int, int], ...] = ()) -> tuple[str, dict[str, Any]]:
    """A PyTorch >= 2.1 CUDA OOM's figures, each in GiB unless ``units`` gives its unit (in the order
    total, free, used, allocated, unalloc, pools)."""
    u = list(units) + [GIB] * (6 - len(units))

    def b(x: float | None, k: int) -> int | None:
        return None if x is None else int(round(x * u[k]))

    alloc_b, unalloc_b = b(allocated, 3), b(unalloc, 4)
    out: dict[str, Any] = {"framework": "pytorch", "requested_bytes": int(round(requested * unit)),
                           "cuda_device": device, "total_bytes": b(total, 0), "free_bytes": b(free, 1),
                           "process_used_bytes": b(used, 2), "allocated_bytes": alloc_b,
                           "reserved_bytes": None if alloc_b is None or unalloc_b is None else alloc_b + unalloc_b,
                           "private_pool_bytes": b(pools, 5), "memory_kind": "device", "other_processes": others}
    return _oom(**out)


# --- log lines ------------------------------------------------------------------------------------
LOG: tuple[Line, ...] = (
    # PyTorch >= 2.1 CUDA out of memory (the wording before the private pools, still printed by 2.1/2.2)
    Line("murong-xu/CADS#4", "PyTorch 2.x (torch.OutOfMemoryError, expandable_segments hint)",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of "
         "31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory in "
         "use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but "
         "unallocated. If reserved but unallocated memory is large try setting "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
         "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
         (_pyt(22.78, GIB, 0, 31.47, 12.73, used=18.73, allocated=9.08, unalloc=9.35),)),
    Line("Synthintel0/MyGirlGPT#11", "PyTorch 2.1 (\"capacty\")",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacty of "
         "4.00 GiB of which 41.56 MiB is free. Including non-PyTorch memory, this process has 3.44 GiB memory in use. "
         "Of the allocated memory 2.58 GiB is allocated by PyTorch, and 1.90 MiB is reserved by PyTorch but "
         "unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid "
         "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF.",
         (_pyt(32.0, MIB, 0, 4.0, 41.56, used=3.44, allocated=2.58, unalloc=1.90, units=(GIB, MIB, GIB, GIB, MIB)),)),
    Line("lllyasviel/FramePack#369", "PyTorch 2.x (FramePack, 2025)",
         "...CUDA out of memory. Tried to allocate 30.29 GiB. GPU 0 has a total capacity of 10.74 GiB of which 3.69 "
         "GiB is free. Including non-PyTorch memory, this process has 6.68 GiB memory in use. Of the allocated memory "
         "6.10 GiB is allocated by PyTorch, and 396.58 MiB is reserved by PyTorch but unallocated. If reserved but "
         "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
         "fragmentation.  See documentation for Memory Management  "
         "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
         (_pyt(30.29, GIB, 0, 10.74, 3.69, used=6.68, allocated=6.10, unalloc=396.58,
               units=(GIB, GIB, GIB, GIB, MIB)),)),
    Line("kerrj/lerf#73", "PyTorch 2.1 (\"capacty\")",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacty of "
         "23.65 GiB of which 1.66 GiB is free. Including non-PyTorch memory, this process has 20.81 GiB memory in use. "
         "Of the allocated memory 12.09 GiB is allocated by PyTorch, and 4.84 GiB is reserved by PyTorch but "
         "unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid "
         "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
         (_pyt(3.0, GIB, 0, 23.65, 1.66, used=20.81, allocated=12.09, unalloc=4.84),)),
    Line("carolchenyx/MGFN.#35", "PyTorch 2.1 (\"0 bytes is free\", no process line)",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacty of "
         "6.00 GiB of which 0 bytes is free. Of the allocated memory 2.93 GiB is allocated by PyTorch, and 2.30 GiB "
         "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
         "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
         "PYTORCH_CUDA_ALLOC_CONF",
         (_pyt(1.70, GIB, 0, 6.0, 0, allocated=2.93, unalloc=2.30, units=(GIB, 1)),)),
    Line("levihsu/OOTDiffusion#167", "PyTorch 2.1 (nothing allocated yet)",
         "when trying to python run_ootd.py i get this error: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried "
         "to allocate 2.00 GiB. GPU 0 has a total capacty of 4.00 GiB of which 2.80 GiB is free. Of the allocated "
         "memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
         (_pyt(2.0, GIB, 0, 4.0, 2.80, allocated=0, unalloc=0, units=(GIB, GIB, GIB, 1, 1)),)),
    Line("light-and-ray/sd-webui-replacer#74", "PyTorch 2.1 (indented in a traceback)",
         "    torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 27.12 GiB. GPU 0 has a total capacty "
         "of 11.99 GiB of which 0 bytes is free. Of the allocated memory 16.16 GiB is allocated by PyTorch, and 144.59 "
         "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
         "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
         "PYTORCH_CUDA_ALLOC_CONF",
         (_pyt(27.12, GIB, 0, 11.99, 0, allocated=16.16, unalloc=144.59, units=(GIB, 1, GIB, GIB, MIB)),)),
    Line("YingqianWang/iPASSR#9", "PyTorch 1.13/2.0 (the wording before 2.1, torch.cuda.OutOfMemoryError)",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 10.73 GiB (GPU 0; 8.00 GiB total "
         "capacity; 17.20 GiB already allocated; 0 bytes free; 19.15 GiB reserved in total by PyTorch) If reserved "
         "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for "
         "Memory Management and PYTORCH_CUDA_ALLOC_CONF",
         (_oom(framework="pytorch", requested_bytes=int(round(10.73 * GIB)), cuda_device=0, total_bytes=8 * GIB,
               allocated_bytes=int(round(17.20 * GIB)), free_bytes=0, reserved_bytes=int(round(19.15 * GIB))),)),
    Line("vllm-project/vllm#19186", "vLLM V1 0.9 (torch.cuda.graph capture), (VllmWorker rank=N pid=N) prefix",
         "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA error: "
         "out of memory",
         (_oom(framework="cuda", rank=3),)),
    # JAX / XLA
    Line("google-deepmind/jaxline#11", "JAX (2022), as the issue quotes it",
         "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 285212672 bytes.",
         (_oom(framework="xla", requested_bytes=285212672, memory_kind=None),)),
    Line("google-deepmind/alphafold#1023", "jaxlib XlaRuntimeError (AlphaFold 2.3)",
         "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
         "7406166528 bytes.",
         (_oom(framework="xla", requested_bytes=7406166528),)),
    Line("patrickbryant1/AFProfile#8", "jaxlib XlaRuntimeError (2023, BufferAssignment OOM Debugging follows)",
         "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
         "4770354232 bytes.",
         (_oom(framework="xla", requested_bytes=4770354232),)),
    Line("jax-ml/jax#13428", "jaxlib XlaRuntimeError (2022)",
         "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 "
         "bytes.",
         (_oom(framework="xla", requested_bytes=6291456),)),
    Line("sokrypton/ColabFold#65", "JAX RuntimeError (2021)",
         "RuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 14285187448 bytes.",
         (_oom(framework="xla", requested_bytes=14285187448),)),
    Line("jax-ml/jax#4994", "JAX 0.2 (\"Resource exhausted\", a pytest summary line)",
         "FAILED tests/core_test.py::CoreTest::test_jit_42 - RuntimeError: Resource exhausted: Out of memory while "
         "trying to allocate 24 bytes.",
         (_oom(framework="xla", requested_bytes=24, memory_kind=None),)),
    Line("jax-ml/jax#788", "jaxlib 0.1.2x (XLA local_client, \"Resource exhausted\")",
         "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:672] "
         "Execution of replica 0 failed: Resource exhausted: Out of memory while trying to allocate 5520758552 bytes.",
         (_oom(framework="xla", requested_bytes=5520758552),),
         adapted="the issue wrapped the line after \"Out\""),
    Line("onpix/LLNeRF#9", "jaxlib XlaRuntimeError (2023, \"Out of memory allocating\")",
         "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 20029400304 bytes.",
         (_oom(framework="xla", requested_bytes=20029400304),)),
    Line("jax-ml/jax#27354", "XLA BFC allocator (2025)",
         "2025-03-23 20:28:59.832181: W external/xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_0_bfc) "
         "ran out of memory trying to allocate 1.25TiB (rounded to 1374521760000)requested by op ",
         (_oom(framework="xla", requested_bytes=1374521760000, cuda_device=0, memory_kind="device"),)),
    Line("NovaSky-AI/SkyRL#624", "XLA CUDA async allocator (2025)",
         "E1103 18:23:55.103160 3413767 gpu_cudamallocasync_allocator.cc:361] gpu_async_1 cuMemAllocAsync failed to "
         "allocate 1225195446464 bytes: RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory",
         (_oom(framework="xla", requested_bytes=1225195446464, cuda_device=1, memory_kind="device"),)),
    # vLLM V1: a worker's death as the executor reports it
    Line("vllm-project/vllm#20657", "vLLM V1 0.9 (the issue's title)",
         "[multiproc_executor.py:140] Worker proc VllmWorker-2 died unexpectedly, shutting down executor.",
         (_end(how="child-failed", worker="VllmWorker-2", rank=2),)),
    Line("OpenPipe/ART#201", "vLLM V1 0.9 (2 x A100)",
         "ERROR 07-04 17:35:16 [multiproc_executor.py:140] Worker proc VllmWorker-1 died unexpectedly, shutting down "
         "executor.",
         (_end(how="child-failed", worker="VllmWorker-1", rank=1),)),
    Line("intel/llm-scaler#154", "vLLM V1 (llm-scaler-vllm 1.0) under docker compose",
         "eap-llm-server-on-arc  | ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc VllmWorker-3 died "
         "unexpectedly, shutting down executor.",
         (_end(how="child-failed", worker="VllmWorker-3", rank=3),)),
    # torchrun
    Line("lmzpai/roboMamba#10", "PyTorch 2.6 torchrun (glog header)",
         "E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed "
         "(exitcode: -9) local_rank: 5 (pid: 2630) of binary: /root/miniconda3/bin/python",
         (_end(how="child-failed", exit_code=-9, pid=2630, local_rank=5, signal="SIGKILL"),)),
    Line("OpenBMB/MiniCPM-V#770", "PyTorch 2.x torchrun (the issue cut the glog header)",
         "torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) local_rank: 0 (pid: 1322) of "
         "binary: /root/miniconda3/bin/python",
         (_end(how="child-failed", exit_code=-9, pid=1322, local_rank=0, signal="SIGKILL"),)),
    Line("hpcaitech/ColossalAI#3514", "PyTorch 1.13/2.0 torchrun (logging module prefix)",
         "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of "
         "binary: /data/chenhao/anaconda3/envs/ColossalAI-Chat/bin/python",
         (_end(how="child-failed", exit_code=-9, pid=812917, local_rank=3, signal="SIGKILL"),)),
    Line("meta-llama/llama#706", "PyTorch 2.0 torchrun",
         "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 333202) of "
         "binary: /home/akemid/llama/venv/bin/python3",
         (_end(how="child-failed", exit_code=-9, pid=333202, local_rank=0, signal="SIGKILL"),)),
    Line("yangjianxin1/Firefly#171", "PyTorch 2.0 torchrun",
         "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 4 (pid: 899509) of "
         "binary: /home/xdx/miniconda3/envs/baichuanft/bin/python",
         (_end(how="child-failed", exit_code=-9, pid=899509, local_rank=4, signal="SIGKILL"),),
         adapted="the issue flattened the launcher's lines into one; this is its ERROR line alone"),
    Line("lzhxmu/CPPO#6", "PyTorch 2.5 torchrun under accelerate (ChildFailedError's Root Cause block)",
         "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
         "============================================================\n"
         "src/open_r1/grpo_gsm.py FAILED\n"
         "------------------------------------------------------------\n"
         "Failures:\n"
         "  <NO_OTHER_FAILURES>\n"
         "------------------------------------------------------------\n"
         "Root Cause (first observed failure):\n"
         "[0]:\n"
         "  time      : 2025-05-21_15:43:03\n"
         "  host      : mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker\n"
         "  rank      : 0 (local_rank: 0)\n"
         "  exitcode  : -9 (pid: 14750)\n"
         "  error_file: <N/A>\n"
         "  traceback : Signal 9 (SIGKILL) received by PID 14750\n"
         "============================================================",
         (_end(how="child-failed", rank=0, local_rank=0, exit_code=-9, pid=14750, signal="SIGKILL",
               host="mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker"),)),
    Line("apple/ml-recurrent-drafter#5", "PyTorch 2.4 torchrun (Root Cause block)",
         "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
         "=====================================================\n"
         "recurrent_drafting/cmd/train.py FAILED\n"
         "-----------------------------------------------------\n"
         "Failures:\n"
         "  <NO_OTHER_FAILURES>\n"
         "-----------------------------------------------------\n"
         "Root Cause (first observed failure):\n"
         "[0]:\n"
         "  time      : 2024-09-09_09:36:56\n"
         "  host      : f5735d9ffd4f\n"
         "  rank      : 7 (local_rank: 7)\n"
         "  exitcode  : -9 (pid: 3309)\n"
         "  error_file: <N/A>",
         (_end(how="child-failed", rank=7, local_rank=7, exit_code=-9, pid=3309, signal="SIGKILL",
               host="f5735d9ffd4f"),),
         adapted="the search excerpt ends inside the traceback line: the block up to error_file"),
    Line("pytorch/pytorch#175254", "PyTorch 2.11 (the signal's name after the pid), as the pull request shows it",
         "Root Cause (first observed failure):\n"
         "[0]:\n"
         "  exitcode  : -11 (pid: 5277) (SIGSEGV)",
         (_end(how="child-failed", exit_code=-11, pid=5277, signal="SIGSEGV"),),
         adapted="the pull request quotes the exitcode line alone; the block's header and entry are torchrun's"),
    # DeepSpeed's launcher
    Line("deepspeedai/DeepSpeedExamples#626", "DeepSpeed 0.8.3 launcher",
         "[2023-07-10 04:26:35,999] [ERROR] [launch.py:324:sigkill_handler] "
         "['/global/D1/homes/sushant/sushanta/venv/bin/python3.10', '-u', 'trainCLM.py', '--local_rank=1', "
         "'--deepspeed', '/home/sushant/D1/sushanta/try/nepaligpt/clm/config/deepspeed_config.json'] exits with "
         "return code = -11",
         (_end(how="child-failed", exit_code=-11, signal="SIGSEGV", local_rank=1),)),
    Line("deepspeedai/DeepSpeed#3232", "DeepSpeed 0.9 launcher (DeepSpeed-Chat)",
         "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', "
         "'--local_rank=0', '--data_path', 'Dahoas/rm-static', 'Dahoas/full-hh-rlhf', "
         "'Dahoas/synthetic-instruct-gptj-pairwise', 'yitingxie/rlhf-reward-datasets', 'openai/webgpt_comparisons', "
         "'stanfordnlp/SHP', '--data_split', '2,4,4', '--model_name_or_path', 'facebook/opt-125m', "
         "'--per_device_train_batch_size', '2', '--per_device_eval_batch_size', '8', '--max_seq_len', '512', "
         "'--learning_rate', '9.65e-6', '--weight_decay', '0.1', '--num_train_epochs', '2', "
         "'--gradient_accumulation_steps', '1', '--lr_scheduler_type', 'cosine', '--num_warmup_steps', '0', "
         "'--seed', '1234', '--zero_stage', '2', '--deepspeed', '--output_dir', "
         "'/content/DeepSpeedExamples/applications/DeepSpeed-Chat/output/actor-models/125m'] exits with return code = -9",
         (_end(how="child-failed", exit_code=-9, signal="SIGKILL", local_rank=0),)),
    Line("deepspeedai/DeepSpeed#4890", "DeepSpeed 0.12 launcher (the issue's title, the command elided)",
         "[ERROR] [launch.py:321:sigkill_handler [xxx] exits with return code = -9",
         (_end(how="child-failed", exit_code=-9, signal="SIGKILL", local_rank=None),)),
    # NCCL through PyTorch's watchdog
    Line("pytorch/pytorch#97066", "PyTorch 2.0 (before the watchdog rewrite)",
         "[E ProcessGroupNCCL.cpp:464] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
         "OpType=ALLREDUCE, Timeout(ms)=10000) ran for 10917 milliseconds before timing out.",
         (("nccl-timeout", {"seq": 1, "op_type": "ALLREDUCE", "timeout_ms": 10000, "elapsed_ms": 10917, "rank": 0}),)),
    Line("pytorch/pytorch#97066", "PyTorch 2.0",
         "[E ProcessGroupNCCL.cpp:478] Some NCCL operations have failed or timed out. Due to the asynchronous nature "
         "of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
         (("nccl-abort", {}),)),
    Line("zd11024/NaviLLM#34", "PyTorch 2.3 ([rankN]: prefix, the watchdog's exception)",
         "[rank0]:[E ProcessGroupNCCL.cpp:1182] [Rank 0] NCCL watchdog thread terminated with exception: [Rank 0] "
         "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLGATHER, NumelIn=1, NumelOut=2, "
         "Timeout(ms)=600000) ran for 600168 milliseconds before timing out.",
         (("nccl-timeout", {"seq": 1, "op_type": "ALLGATHER", "numel_in": 1, "numel_out": 2, "timeout_ms": 600000,
                            "elapsed_ms": 600168, "rank": 0}),),
         adapted="the issue wrapped the line at 100 columns"),
    Line("hiyouga/LlamaFactory#6269", "PyTorch 2.5 (\"Timeout at NCCL work\")",
         "[rank0]:[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 0] Timeout at NCCL work: 7753, "
         "last enqueued NCCL work: 7755, last completed NCCL work: 7752.",
         (("nccl-progress", {"failed_seq": 7753, "last_enqueued_seq": 7755, "last_completed_seq": 7752,
                             "process_group": "1", "rank": 0}),)),
    Line("hiyouga/LlamaFactory#6269", "PyTorch 2.5",
         "[rank2]:[E1206 18:44:16.994981286 ProcessGroupNCCL.cpp:621] [Rank 2] Some NCCL operations have failed or "
         "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
         "corrupted/incomplete data.",
         (("nccl-abort", {"rank": 2}),)),
    Line("mila-iqia/milabench#269", "PyTorch 2.4 under milabench's per-node prefix",
         "dinov2-giant-nodes.cn-d003.nolog [stderr] [rank3]:[E909 09:55:46.996672294 ProcessGroupNCCL.cpp:1709] [PG 0 "
         "(default_pg) Rank 3] Timeout at NCCL work: 2070, last enqueued NCCL work: 2082, last completed NCCL work: "
         "2069.",
         (("nccl-progress", {"failed_seq": 2070, "last_enqueued_seq": 2082, "last_completed_seq": 2069,
                             "process_group": "0", "rank": 3}),),
         adapted="the issue wrapped the line"),
    Line("huggingface/open-r1#620", "PyTorch 2.6 (PG GUID, repeated what())",
         "  what():    what():    what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread "
         "terminated with exception: [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, "
         "OpType=BROADCAST, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 milliseconds before "
         "timing out.",
         (("nccl-timeout", {"seq": 4, "op_type": "BROADCAST", "numel_in": 112, "numel_out": 112,
                            "timeout_ms": 1800000, "elapsed_ms": 1800010, "process_group": "0", "rank": 2}),),
         adapted="the issue wrapped the line"),
    # NCCL's own WARN lines
    Line("NVIDIA/nccl#963", "NCCL 2.18 (bootstrap)",
         "9306dc444753:248281:248334 [2] misc/socket.cc:518 NCCL WARN Net : Call to recv from 172.17.0.2<40537> "
         "failed : Connection reset by peer",
         (_warn(call="recv", peer="172.17.0.2<40537>", error="Connection reset by peer", errno=104,
                host="9306dc444753", pid=248281, cuda_device=2, source="misc/socket.cc:518"),)),
    Line("NVIDIA/nccl#963", "NCCL 2.18",
         "9306dc444753:248281:248336 [3] misc/socket.cc:456 NCCL WARN Net : Connect to 172.17.0.2<40537> failed : "
         "Connection reset by peer",
         (_warn(call="connect", error="Connection reset by peer", errno=104, cuda_device=3),)),
    Line("NVIDIA/nccl-tests#185", "NCCL 2.19+ (socketProgressOpt)",
         "dgxh100-4:460770:460869 [0] misc/socket.cc:30 NCCL WARN socketProgressOpt: Call to recv from "
         "11.1.128.128<52035> failed : Connection reset by peer",
         (_warn(call="recv", peer="11.1.128.128<52035>", error="Connection reset by peer", errno=104,
                host="dgxh100-4", source="misc/socket.cc:30"),)),
    Line("NVIDIA/nccl-tests#185", "NCCL 2.19+ (the issue's title)",
         "misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable",
         (_warn(call="ibv_modify_qp", error="Network is unreachable", errno=101),)),
    Line("NVIDIA/nccl#1920", "NCCL 2.2x (send, engine timestamp and a bracketed date)",
         "2025-11-24T03:20:21.001125857Z [2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN "
         "socketProgressOpt: Call to send to 10.44.137.149<52905> failed : Connection reset by peer",
         (_warn(call="send", peer="10.44.137.149<52905>", error="Connection reset by peer", errno=104),)),
    Line("NVIDIA/nccl-tests#166", "NCCL 2.18",
         "ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed : "
         "Software caused connection abort",
         (_warn(call="socketStartConnect", error="Software caused connection abort", errno=103),)),
    Line("NVIDIA/nccl-tests#166", "NCCL 2.18",
         "ubuntu:39964:40044 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
         "node1<57557>",
         (_warn(source="misc/socket.cc:49", call=None),)),
    Line("NVIDIA/nccl-tests#166", "NCCL 2.18 (proxy)",
         "ubuntu:39964:40075 [0] proxy.cc:1519 NCCL WARN [Proxy Service 0] Failed to execute operation Connect from "
         "rank 0, retcode 2",
         (_warn(source="proxy.cc:1519"),)),
    Line("NVIDIA/nccl-tests#252", "NCCL 2.1x IB plugin",
         "kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> with "
         "error 4, opcode 5327, len 5327, vendor err 81 (Send)",
         (_warn(host="kolyoz2", pid=25146, source="ib_plugin.c:1105"),)),
    Line("NVIDIA/nccl#1232", "NCCL 2.18 (the issue's title)",
         "NCCL WARN socketProgress: Connection closed by remote peer node2<42830>",
         (_warn(host=None),)),
)

_TF_SHAPE = "and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"


def _tf(*shape: int, device: int = 0) -> tuple[str, dict[str, Any]]:
    n = 4
    for d in shape:
        n *= d
    return _oom(framework="tensorflow", shape=shape, dtype="float", cuda_device=device, requested_bytes=n)


LOG += (
    # PyTorch's other processes on the GPU (>= 2.1, as the pull request that added them shows the message)
    Line("pytorch/pytorch#99699", "PyTorch 2.1 (the pull request's example: another process on the GPU)",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 138.00 MiB. GPU 0 has a total capacty of "
         "15.90 GiB of which 8.44 MiB is free. Process 1246069 has 577.00 MiB memory in use. Including non-PyTorch "
         "memory, this process has 15.32 GiB memory in use. Of the allocated memory 14.12 GiB is allocated by "
         "PyTorch, and 410.41 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
         "try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
         "PYTORCH_CUDA_ALLOC_CONF",
         (_pyt(138.0, MIB, 0, 15.90, 8.44, used=15.32, allocated=14.12, unalloc=410.41,
               units=(GIB, MIB, GIB, GIB, MIB), others=((1246069, 577 * MIB),)),),
         adapted="the pull request wrapped the message over lines"),
    Line("antgroup/echomimic_v2#115", "PyTorch 2.5 (pinokio)",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of 15.69 "
         "GiB of which 3.71 GiB is free. Including non-PyTorch memory, this process has 11.14 GiB memory in use. Of "
         "the allocated memory 10.14 GiB is allocated by PyTorch, and 771.43 MiB is reserved by PyTorch but "
         "unallocated. If reserved but unallocated memory is large try setting "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
         "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
         (_pyt(4.22, GIB, 0, 15.69, 3.71, used=11.14, allocated=10.14, unalloc=771.43,
               units=(GIB, GIB, GIB, GIB, MIB)),)),
    Line("pytorch/torchtitan#2374", "PyTorch 2.11 (torchtitan; the message's head as the pull request quotes it)",
         "  torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 14.00 GiB. GPU 0 has a total capacity of "
         "94.99 GiB of which 9.30 GiB is free.",
         (_pyt(14.0, GIB, 0, 94.99, 9.30),)),
    Line("ROCm/TheRock#2118", "PyTorch 2.9 on ROCm (HIP; private pools; a memory fraction)",
         "2025-11-12T11:25:13.4971964Z FAILED [0.0005s] "
         "external-builds/pytorch/pytorch/test/test_autograd.py::TestAutogradDeviceTypeCUDA::test_parameter_resize_cuda "
         "- torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
         "255.98 GiB of which 244.65 GiB is free. 1.05 GiB allowed; Of the allocated memory 1017.01 MiB is allocated "
         "by PyTorch, with 17.00 MiB allocated in private pools (e.g., HIP Graphs), and 54.99 MiB is reserved by "
         "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
         "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
         (_pyt(2.0, MIB, 0, 255.98, 244.65, allocated=1017.01, unalloc=54.99, pools=17.0,
               units=(GIB, GIB, GIB, MIB, MIB, MIB)),)),
    Line("pytorch/pytorch#175431", "PyTorch 2.10 on ROCm (HIP, GPU 7)",
         "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 7 has a total capacity of 287.98 "
         "GiB of which 203.49 GiB is free. Of the allocated memory 68.63 GiB is allocated by PyTorch, and 14.93 GiB is "
         "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
         "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
         (_pyt(2.0, MIB, 7, 287.98, 203.49, allocated=68.63, unalloc=14.93),)),
    Line("taohan10200/IIM#28", "PyTorch 1.10 (the issue's title runs the lines together)",
         "RuntimeError: CUDA error: out of memory CUDA kernel errors might be asynchronously reported at some other API "
         "call,so the stacktrace below might be incorrect. For debugging consider passing CUDA_LAUNC",
         (_oom(framework="cuda"),)),
    Line("google-research/text-to-text-transfer-transformer#57", "TensorFlow 1.15 (the issue's title)",
         "CUDA_ERROR_OUT_OF_MEMORY: out of memory (on a GPU)",
         (_oom(framework="cuda"),)),
    # TensorFlow
    Line("Azure/MachineLearningNotebooks#880", "TensorFlow 1.14 (2 root errors)",
         "  (0) Resource exhausted: OOM when allocating tensor with shape[16,112,112,147] " + _TF_SHAPE,
         (_tf(16, 112, 112, 147),)),
    Line("tensorflow/models#5527", "TensorFlow 1.x",
         "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[64,2016,9,9] "
         + _TF_SHAPE, (_tf(64, 2016, 9, 9),)),
    Line("dBeker/Faster-RCNN-TensorFlow-Python3#110", "TensorFlow 1.x",
         "ResourceExhaustedError: OOM when allocating tensor with shape[25088,4096] " + _TF_SHAPE,
         (_tf(25088, 4096),)),
    Line("tensorflow/models#7142", "TensorFlow 1.x (within a sentence)",
         "I tried to run this program that makes use of object detection based from Tensorflow's "
         "object_detection_tutorial.ipynb.. I tried importing my own model instead of downloading from the internet, "
         "but I keep getting this error that says ResourceExhaustedError (see above for traceback): OOM when "
         "allocating tensor with shape[500,17,17,4032] " + _TF_SHAPE + ".",
         (_tf(500, 17, 17, 4032),)),
    Line("tensorflow/tensorflow#136", "TensorFlow 1.x (StyleGAN)",
         "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[128,3,8,128,8,128] "
         + _TF_SHAPE, (_tf(128, 3, 8, 128, 8, 128),)),
    Line("zzw922cn/Automatic_Speech_Recognition#78", "TensorFlow 1.8 (op_kernel)",
         "2018-06-08 17:26:00.908130: W tensorflow/core/framework/op_kernel.cc:1202] OP_REQUIRES failed at "
         "tile_ops.cc:123 : Resource exhausted: OOM when allocating tensor with shape[16,1,892800,8,4,2,2] "
         + _TF_SHAPE, (_tf(16, 1, 892800, 8, 4, 2, 2),)),
    Line("udacity/aind2-cnn#15", "TensorFlow 1.14",
         "  (0) Resource exhausted: OOM when allocating tensor with shape[8,64,224,224] " + _TF_SHAPE,
         (_tf(8, 64, 224, 224),)),
    Line("brightics/studio#815", "TensorFlow 1.x on Windows",
         "2021-01-11 15:12:47.749204: W T:\\src\\github\\tensorflow\\tensorflow\\core\\framework\\op_kernel.cc:1275] "
         "OP_REQUIRES failed at conv_ops.cc:682 : Resource exhausted: OOM when allocating tensor with shape[64,64,3,3] "
         + _TF_SHAPE, (_tf(64, 64, 3, 3),)),
    # JAX / XLA, more forms
    Line("google-deepmind/jax_privacy#10", "jaxlib 0.4 (a request on a device ordinal)",
         "Original error: RESOURCE_EXHAUSTED: Failed to allocate request for 176.00MiB (184549376B) on device ordinal 0",
         (_oom(framework="xla", requested_bytes=184549376, cuda_device=0, memory_kind="device"),)),
    Line("flatironinstitute/nemos#345", "jaxlib 0.5 (2025)",
         "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3199993600 "
         "bytes.",
         (_oom(framework="xla", requested_bytes=3199993600),)),
    Line("google-deepmind/alphafold#197", "AlphaFold 2.0 (jaxlib 0.1.6x, the issue's title)",
         "RuntimeError: Resource exhausted: Out of memory while trying to allocate 12582912 bytes.",
         (_oom(framework="xla", requested_bytes=12582912),)),
    Line("google-deepmind/alphafold#197", "AlphaFold 2.0 (unified memory: the line names no GPU)",
         "2021-10-15 15:01:44.577626: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:764] "
         "failed to alloc 2740606464 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
         (_oom(framework="tensorflow", requested_bytes=2740606464, memory_kind=None),)),
    # CUDA faults as frameworks print them
    Line("Acly/krita-ai-diffusion#930", "PyTorch 2.x (ComfyUI)",
         " RuntimeError: CUDA error: unspecified launch failure",
         (_fault(fault="launch-failure"),)),
    Line("SipherAGI/sd-webui-agent-scheduler#201", "PyTorch 2.x (the hint block that follows)",
         "Error: CUDA error: unspecified launch failure\n"
         "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
         "be incorrect.\n"
         "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
         "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
         (_fault(fault="launch-failure"),)),
    Line("deepseek-ai/DeepSeek-MoE#47", "PyTorch 2.6 (the watchdog ended by a CUDA error)",
         "[rank1]:[E410 01:50:33.889423318 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process "
         "group watchdog thread terminated with exception: CUDA error: unspecified launch failure",
         (("nccl-async-error", {"error": "unspecified launch failure", "rank": 1, "process_group": "0", "seq": None}),
          _fault(fault="launch-failure", rank=1))),
    Line("vllm-project/vllm#4108", "PyTorch 2.2 under vLLM 0.4 (Ray)",
         "[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: an "
         "illegal memory access was encountered",
         (("nccl-async-error", {"error": "an illegal memory access was encountered", "rank": 0}),
          _fault(fault="illegal-memory-access", rank=0))),
    Line("vllm-project/vllm#19890", "NCCL 2.26 under vLLM 0.9 (the issue's title: the CUDA error's number)",
         "enqueue.cc:1556 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",
         (_warn(call="cuda", error="an illegal memory access was encountered", code=700, source=None),
          _fault(fault="illegal-memory-access", code=700))),
    Line("NVIDIA/TensorRT-LLM#448", "NCCL 2.19.3 (the issue's title, no number)",
         "misc/strongstream.cc:343 NCCL WARN Cuda failure 'an illegal memory access was encountered'",
         (_warn(call="cuda", code=None), _fault(fault="illegal-memory-access", code=None))),
    Line("NVIDIA/nccl#629", "NCCL 2.1x",
         "A03-R28-I49-2-6000166:104934:104934 [1] init.cc:204 NCCL WARN Cuda failure 'an illegal memory access was "
         "encountered'",
         (_warn(call="cuda", host="A03-R28-I49-2-6000166", pid=104934, cuda_device=1, source="init.cc:204"),
          _fault(fault="illegal-memory-access"))),
    Line("NVIDIA/nccl#629", "NCCL 2.1x (recv from a peer)",
         "A03-R28-I49-3-9000018:46841:46987 [0] include/socket.h:428 NCCL WARN Net : Call to recv from "
         "11.127.49.2<36048> failed : Connection reset by peer",
         (_warn(call="recv", peer="11.127.49.2<36048>", errno=104, source="include/socket.h:428"),)),
    Line("THU-SI/Physics3D#2", "NVIDIA Warp (CUDA error 700)",
         "Warp CUDA error 700: an illegal memory access was encountered "
         "(/buildAgent/work/a9ae500d09a78409/warp/native/warp.cu:223)",
         (_fault(fault="illegal-memory-access", code=700),)),
    Line("microsoft/CNTK#3073", "CNTK 2.0 (CUDA 9: the old error number)",
         "RuntimeError: CUDA failure 77: an illegal memory access was encountered",
         (_fault(fault="illegal-memory-access", code=77),)),
    Line("NVIDIA/cuda-samples#38", "the issue's title (a CUDA sample's check macro)",
         "an illegal memory access was encountered(CUDA error no.=700)",
         (_fault(fault="illegal-memory-access", code=700),)),
    # Killed after a progress bar
    Line("eosphoros-ai/DB-GPT#63", "transformers' tqdm (the issue's title)",
         "Loading checkpoint shards: 0%| | 0/2 [00:00<?, ?it/s]Killed",
         (_end(how="killed", signal="SIGKILL", exit_code=137),)),
    Line("chatchat-space/Langchain-Chatchat#35", "transformers' tqdm, 38%",
         "Loading checkpoint shards:  38%|██████▊           | 3/8 [00:02<00:03,  1.28it/s]Killed",
         (_end(how="killed", signal="SIGKILL"),)),
    Line("baichuan-inc/Baichuan2#138", "zsh's job report after a progress bar",
         "Loading checkpoint shards:   0%|          | 0/3 [00:00<?, ?it/s][1]    26478 killed     python test.py",
         (_end(how="killed", pid=26478, signal="SIGKILL"),),
         adapted="the progress bar's padding shortened to tqdm's default width"),
)

LOG += (
    # NCCL's result codes as PyTorch raises them (the version kept)
    Line("NVIDIA/nccl#1928", "NCCL 2.28.8 under PyTorch 2.9 ([rankN]: prefix)",
         "[rank3]: torch.distributed.DistBackendError: NCCL error in: "
         "/opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3763, remote process exited or there "
         "was a network error, NCCL version 2.28.8",
         (("nccl-error", {"code": "ncclRemoteError", "nccl_version": "2.28.8", "rank": 3}),)),
    Line("NVIDIA/nccl#1928", "NCCL 2.28.8 (the result's own line)",
         "[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
         "prematurely.",
         (("nccl-error", {"code": "ncclRemoteError", "nccl_version": None, "rank": 3}),)),
    Line("NVIDIA/nccl#2076", "NCCL 2.21.5 under PyTorch 2.5",
         "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
         "remote process exited or there was a network error, NCCL version 2.21.5",
         (("nccl-error", {"code": "ncclRemoteError", "nccl_version": "2.21.5"}),)),
    Line("NVIDIA/nccl#934", "NCCL 2.18.5 under PyTorch 2.1",
         "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1347, "
         "remote process exited or there was a network error, NCCL version 2.18.5",
         (("nccl-error", {"code": "ncclRemoteError", "nccl_version": "2.18.5"}),)),
    Line("NVIDIA/nccl#1241", "NCCL 2.17.1 (the issue's title, cut)",
         "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1287, invalid usage, "
         "NCCL version 2.17.1 ncclInvalidUsage: This usually reflects invalid usage of NCCL library. Las",
         (("nccl-error", {"code": "ncclInvalidUsage", "nccl_version": "2.17.1"}),)),
    Line("NVIDIA/nccl#795", "NCCL 2.14.3 (recv: broken pipe)",
         "a100-st-p4d24xlarge-22:183006:183220 [1] misc/socket.cc:518 NCCL WARN Net : Call to recv from "
         "10.200.84.247<58355> failed : Broken pipe",
         (_warn(call="recv", peer="10.200.84.247<58355>", error="Broken pipe", errno=32, cuda_device=1),)),
    Line("NVIDIA/nccl#795", "NCCL 2.14.3 (proxy)",
         "a100-st-p4d24xlarge-22:183006:183220 [1] proxy.cc:1119 NCCL WARN [Proxy Service 9] Failed to execute "
         "operation Connect from rank 9, retcode 6",
         (_warn(host="a100-st-p4d24xlarge-22", source="proxy.cc:1119"),)),
)

KIB = 1 << 10


def _old(requested: float, ru: int, total: float, allocated: float, au: int, free: float, fu: int,
         reserved: float, resu: int) -> tuple[str, dict[str, Any]]:
    """A PyTorch < 2.1 CUDA OOM's figures (``(GPU 0; T total capacity; A already allocated; F free; R reserved
    in total by PyTorch)``, ``cached`` before 1.4), each with its unit; total in GiB."""
    return _oom(framework="pytorch", cuda_device=0, requested_bytes=int(round(requested * ru)),
                total_bytes=int(round(total * GIB)), allocated_bytes=int(round(allocated * au)),
                free_bytes=int(round(free * fu)), reserved_bytes=int(round(reserved * resu)))


LOG += (
    Line("FireRedTeam/FireRedTTS2#17", "PyTorch 2.x (2025: two other processes on the GPU)",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 26.00 MiB. GPU 0 has a total capacity of "
         "11.66 GiB of which 9.81 MiB is free. Process 3893521 has 618.00 MiB memory in use. Process 1493972 has "
         "1.28 GiB memory in use. Including non-PyTorch memory, this process has 9.74 GiB memory in use. Of the "
         "allocated memory 9.30 GiB is allocated by PyTorch, and 163.19 MiB is reserved by PyTorch but unallocated. "
         "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
         "to avoid fragmentation.  See documentation for Memory Management  "
         "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
         (_pyt(26.0, MIB, 0, 11.66, 9.81, used=9.74, allocated=9.30, unalloc=163.19,
               units=(GIB, MIB, GIB, GIB, MIB),
               others=((3893521, 618 * MIB), (1493972, int(round(1.28 * GIB))))),)),
    Line("liucongg/ChatGLM-Finetuning#28", "PyTorch 1.13/2.0 (torch.cuda.OutOfMemoryError, the old figures)",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 44.99 GiB total "
         "capacity; 6.15 GiB already allocated; 37.32 GiB free; 6.15 GiB reserved in total by PyTorch) If reserved "
         "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for "
         "Memory Management and PYTORCH_CUDA_ALLOC_CONF",
         (_old(128.0, MIB, 44.99, 6.15, GIB, 37.32, GIB, 6.15, GIB),)),
    Line("zihaosheng/VLM-RL#12", "PyTorch 2.0 (the tracker kept the HTML escapes)",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 258.00 MiB (GPU 0; 23.54 GiB total "
         "capacity; 11.75 GiB already allocated; 572.50 MiB free; 12.40 GiB reserved in total by PyTorch) If "
         "reserved memory is &gt;&gt; allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
         "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
         (_old(258.0, MIB, 23.54, 11.75, GIB, 572.50, MIB, 12.40, GIB),)),
    Line("Morizeyao/GPT2-Chinese#215", "PyTorch 1.8 (RuntimeError)",
         "RuntimeError: CUDA out of memory. Tried to allocate 384.00 MiB (GPU 0; 14.76 GiB total capacity; 11.04 GiB "
         "already allocated; 259.75 MiB free; 11.10 GiB reserved in total by PyTorch)",
         (_old(384.0, MIB, 14.76, 11.04, GIB, 259.75, MIB, 11.10, GIB),)),
    Line("shllln/GenerativeGraph#5", "PyTorch 1.0 (\"cached\", KiB)",
         "RuntimeError: CUDA out of memory. Tried to allocate 1024.00 KiB (GPU 0; 11.17 GiB total capacity; 10.90 "
         "GiB already allocated; 576.00 KiB free; 30.96 MiB cached)",
         (_old(1024.0, KIB, 11.17, 10.90, GIB, 576.0, KIB, 30.96, MIB),)),
)

_GA100 = ("NVIDIA/open-gpu-kernel-modules:src/nvidia/src/kernel/gpu/arch/ampere/kern_gpu_ga100.c "
          "(_gpuGenerateErrorLog_GA100's examples)")
_NVS_CSV = "NVIDIA/NVSentinel:health-monitors/syslog-health-monitor/pkg/xid/parser/csv_test.go"
_GPUD_119 = "leptonai/gpud:pkg/nvidia-query/xid/testdata/dmesg-with-xid-119.log"
_GPUD_DMESG = "leptonai/gpud:pkg/nvidia-query/xid/dmesg/dmesg_test.go"

# --- kernel lines (NVRM) ---------------------------------------------------------------------------
KERNEL: tuple[Line, ...] = (
    # MIG and error containment (driver 470+ on A100/H100), as the driver's source prints them
    Line(_GA100, "driver R535 sources (Ampere error containment, MIG attribution)",
         "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
         (_xid(pci_bus_id="0000:01:00.0", xid=94, pid=7194, process_name=None, gpu_instance_id=5,
               compute_instance_id=None, text="Contained: CE User Channel (0x9). RST: No, D-RST: No"),)),
    Line(_GA100, "driver R535 sources (no MIG: a pid without name=)",
         "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No",
         (_xid(pci_bus_id="0000:01:00.0", xid=94, pid=7062, process_name=None, gpu_instance_id=None),)),
    Line(_GA100, "driver R535 sources (uncontained)",
         "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No",
         (_xid(xid=95, pid=7062, process_name=None, text="Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No"),)),
    Line("leptonai/gpud#1174", "gpud's kmsg input (2025)",
         "NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error",
         (_xid(pci_bus_id="0000:9b:00.0", xid=94, pid=1234, process_name="python3", text="Contained ECC error"),)),
    Line("leptonai/gpud#1174", "driver R570+ NVLink 5 (no pid)",
         "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 "
         "0x00000000 0x00000000)",
         (_xid(pci_bus_id="0019:01:00.0", xid=149, pid=None, process_name=None),)),
    Line("leptonai/gpud#1174", "driver R570+ NVLink 5",
         "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 "
         "0x00000000 0x00000000 0x00000000)",
         (_xid(pci_bus_id="0000:00:00.0", xid=149),)),
    Line("leptonai/gpud#1174", "driver R570+ NVLink 5 (non-fatal)",
         "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
         "0x00000000 0x00100000 0x00000004)",
         (_xid(pci_bus_id="0018:01:00.0", xid=145, pid=None),)),
    Line(_NVS_CSV, "driver 570.148 (NVL5, two spaces)",
         "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000 "
         "0x00000000 0x00000000 0x00000000)",
         (_xid(pci_bus_id="0018:01:00.0", xid=149),)),
    Line(_NVS_CSV, "driver 570 (Xid 13, unknown process)",
         "NVRM: Xid (PCI:0000:b5:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 1, TPC "
         "3, SM 0): Out Of Range Address",
         (_xid(pci_bus_id="0000:b5:00.0", xid=13, pid=None, process_name=None,
               text="Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"),)),
    Line(_NVS_CSV, "driver 570 (Xid 13 ESR)",
         "NVRM: Xid (PCI:0000:b5:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x50df30=0x107000e "
         "0x50df34=0x20 0x50df28=0xf81eb60 0x50df2c=0x1174",
         (_xid(xid=13, pid=None),)),
    Line(_NVS_CSV, "driver 570 (Xid 74 NVLink)",
         "NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link "
         "14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
         (_xid(pci_bus_id="0003:00:00.0", xid=74),)),
    Line(_NVS_CSV, "driver 570 (a process name with a dot)",
         "NVRM: Xid (PCI:0000:66:00): 32, pid=2280636, name=train.3, Channel ID 0000000d intr0 00040000",
         (_xid(xid=32, pid=2280636, process_name="train.3", text="Channel ID 0000000d intr0 00040000"),)),
    Line(_NVS_CSV, "driver 570 (no text at all)",
         "NVRM: Xid (PCI:0000:3f:00): 46",
         (_xid(pci_bus_id="0000:3f:00.0", xid=46, pid=None, text=""),)),
    Line(_NVS_CSV, "driver 570 (Xid 69)",
         "NVRM: Xid (PCI:0001:ab:cd): 69, pid=1310987, name=train.3, Class Error: ChId 0008, Class 0000cbc0, Offset "
         "00000184, Data ffffffff, ErrorCode 00000004",
         (_xid(xid=69, pid=1310987, process_name="train.3"),)),
    Line(_NVS_CSV, "driver 570 (a name ends the line)",
         "NVRM: Xid (PCI:0000:9b:00): 8, pid=5678, name=idle_timeout",
         (_xid(xid=8, pid=5678, process_name="idle_timeout", text=""),)),
    Line(_NVS_CSV, "driver 570+ (Xid 154, recovery action)",
         "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
         (_xid(pci_bus_id="0008:01:00.0", xid=154, pid=None,
               text="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"),)),
    Line(_NVS_CSV, "driver 570+ (Xid 154 back to None)",
         "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
         (_xid(xid=154),)),
    Line(_NVS_CSV, "driver 580 (the function in the address)",
         "NVRM: Xid (PCI:0000:00:08.0): 145, RLW_REMAP Nonfatal XC1 i0 Link 10 (0x00000082 0x00000040 0x00000000 "
         "0x00000000 0x00000000 0x00000000)",
         (_xid(pci_bus_id="0000:00:08.0", xid=145),)),
    Line(_NVS_CSV, "driver 580 (the function in the address)",
         "NVRM: Xid (PCI:0000:00:08.0): 145, RLW_REMAP Nonfatal XC1 i0 Link 10 (0x00000004 0x00000040 0x00000000 "
         "0x00000000 0x00000000 0x00000000)",
         (_xid(pci_bus_id="0000:00:08.0", xid=145),)),
    Line(_GPUD_119, "driver 535 (GSP RPC timeout, dmesg -T)",
         "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
         "waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
         (_xid(pci_bus_id="0000:9b:00.0", xid=119, pid=2024380, process_name="nvidia-smi"),)),
    Line(_GPUD_119, "driver 535",
         "[Sun Feb 23 16:24:24 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
         "waiting for RPC response from GPU4 GSP! Expected function 10 (FREE) (0xa55a0210 0x0).",
         (_xid(xid=119, pid=2024380),)),
    Line(_GPUD_119, "driver 535",
         "[Sun Feb 23 16:24:30 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
         "waiting for RPC response from GPU4 GSP! Expected function 10 (FREE) (0xa55a0090 0x0).",
         (_xid(xid=119, pid=2024380),)),
    Line(_GPUD_119, "driver 535",
         "[Sun Feb 23 16:27:12 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=1263500, name=cache_mgr_main, Timeout after "
         "6s of waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801813 0x4c).",
         (_xid(xid=119, pid=1263500, process_name="cache_mgr_main"),)),
    Line(_GPUD_119, "driver 535",
         "[Sun Feb 23 16:30:13 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=1240590, name=gpud, Timeout after 6s of "
         "waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20803032 0x58c).",
         (_xid(xid=119, pid=1240590, process_name="gpud"),)),
    Line(_GPUD_DMESG, "dmesg with the kernel's seconds",
         "[111111111.111] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
         (_xid(pci_bus_id="0000:05:00.0", xid=79, pid=None, text="GPU has fallen off the bus."),)),
    Line(_GPUD_DMESG, "older drivers (no pid/name)",
         "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
         (_xid(pci_bus_id="0000:01:00.0", xid=79, pid=None, text="GPU has fallen off the bus."),)),
    Line(_GPUD_DMESG, "older drivers (no PCI: prefix)",
         "[...] NVRM: Xid (0000:03:00): 14, Channel 00000001",
         (_xid(pci_bus_id="0000:03:00.0", xid=14, text="Channel 00000001"),)),
    Line("leptonai/gpud#46", "driver 535 (Xid 13, dmesg --ctime)",
         "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
         "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
         (_xid(pci_bus_id="0000:cb:00.0", xid=13),)),
    Line("leptonai/gpud#46", "driver 535",
         "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM "
         "Global Exception on (GPC 7, TPC 7, SM 0): Multiple Warp Errors",
         (_xid(xid=13),)),
    Line("leptonai/gpud#46", "driver 535",
         "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics "
         "Exception: ESR 0x57c730=0xc04000b 0x57c734=0x24 0x57c728=0x1f81fb60 0x57c72c=0x1174",
         (_xid(xid=13),)),
    Line("leptonai/gpud#46", "driver 535 (Xid 109)",
         "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
         "errorString CTX SWITCH TIMEOUT, Info 0x58005",
         (_xid(xid=109, pid=1797828, process_name="pt_main_thread"),)),
    Line("akash-network/support#244", "driver 535.183.01",
         "[Wed Jul 31 23:14:18 2024] NVRM: Xid (PCI:0000:00:05): 43, pid=1045242, name=pt_main_thread, Ch 00000008",
         (_xid(pci_bus_id="0000:00:05.0", xid=43, pid=1045242, process_name="pt_main_thread", text="Ch 00000008"),)),
    Line("akash-network/support#244", "driver 535.183.01",
         "[Wed Jul 31 23:15:26 2024] NVRM: Xid (PCI:0000:00:05): 43, pid=1084984, name=pt_main_thread, Ch 00000008",
         (_xid(xid=43, pid=1084984),)),
    Line("akash-network/support#244", "driver 535.183.01 (MMU fault)",
         "[Mon Aug  5 03:54:13 2024] NVRM: Xid (PCI:0000:00:07): 31, pid=2512125, name=python3.10, Ch 00000008, intr "
         "00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x73ac_1c000000. Fault is of type FAULT_PDE "
         "ACCESS_TYPE_VIRT_WRITE",
         (_xid(pci_bus_id="0000:00:07.0", xid=31, pid=2512125, process_name="python3.10"),)),
    Line("akash-network/support#244", "driver 535.183.01 (contained, unknown process)",
         "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM "
         "(0x1). RST: No, D-RST: No",
         (_xid(pci_bus_id="0000:00:08.0", xid=94, pid=None, process_name=None,
               text="Contained: SM (0x1). RST: No, D-RST: No"),)),
    Line("kubernetes-sigs/dra-driver-nvidia-gpu#904", "driver 570 (a test trigger)",
         "[1231741.378609] NVRM: Xid (PCI:0009:01:00): 43, pid=3188489, name=trigger_xid, channel 0x0b00000a",
         (_xid(pci_bus_id="0009:01:00.0", xid=43, pid=3188489, process_name="trigger_xid"),)),
    Line("NVIDIA/open-gpu-kernel-modules#1150", "driver 590.48.01 (Xid 45 after Xid 149)",
         "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
         (_xid(pci_bus_id="0000:dc:00.0", xid=45, pid=1818990, process_name="python3",
               text="Ch 00000001 caused by previous Xid 149"),)),
    Line("NVIDIA/open-gpu-kernel-modules#1150", "driver 590.48.01",
         "kernel: NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused by previous Xid 145",
         (_xid(pci_bus_id="0000:ed:00.0", xid=45, pid=1818992),)),
    Line("NVIDIA/open-gpu-kernel-modules#1150", "driver 590.48.01",
         "kernel: NVRM: Xid (PCI:0000:ba:00): 45, pid=1818989, name=python3, Ch 00000002 caused by previous Xid 145",
         (_xid(pci_bus_id="0000:ba:00.0", xid=45, pid=1818989),)),
    Line("NVIDIA/open-gpu-kernel-modules#1150", "driver 590.48.01",
         "kernel: NVRM: Xid (PCI:0000:97:00): 45, pid=1818987, name=python3, Ch 00000003 caused by previous Xid 145",
         (_xid(pci_bus_id="0000:97:00.0", xid=45, pid=1818987),)),
)

# --- lines that look close and are no signal -------------------------------------------------------
NEGATIVE: tuple[Line, ...] = (
    Line("vllm-project/vllm#14452", "vLLM V1 0.8 (NCCL version at start-up)",
         "(VllmWorker rank=4 pid=907) INFO 03-15 17:24:17 [pynccl.py:69] vLLM is using nccl==2.25.1"),
    Line("NVIDIA/nccl#963", "NCCL 2.18 (the error's trace through INFO)",
         "9306dc444753:248281:248335 [3] NCCL INFO bootstrap.cc:256 -> 6"),
    Line("NVIDIA/nccl#1920", "NCCL 2.2x (INFO trace)",
         "2025-11-24T03:20:21.001128133Z gpu-server320 [5] NCCL INFO misc/socket.cc:64 -> 6"),
    Line("NVIDIA/nccl-tests#252", "NCCL 2.1x (a peer's connection closed, INFO)",
         "kolyoz2:25146:25852 [0] NCCL INFO [Service thread] Connection closed by localRank 0"),
    Line("sgl-project/sglang#4289", "NCCL 2.21 (communicator init start, not complete)",
         "node17-2:36754:36754 [6] NCCL INFO ncclCommInitRank comm 0xa624cf0 rank 6 nranks 8 cudaDev 6 nvmlDev 6 busId "
         "90000 commId 0x551d06754c6bacf2 - Init START"),
    Line("deepspeedai/DeepSpeed#3232", "DeepSpeed 0.9 (the launcher stopping the other ranks)",
         "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266"),
    Line("hpcaitech/ColossalAI#3514", "PyTorch 2.0 torchrun (stopping the other ranks)",
         "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing signal SIGTERM"),
    Line("OpenRLHF/OpenRLHF#841", "DeepSpeed 0.16.3 (INFO)",
         "[2025-03-07 23:55:15,357] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.16.3, "
         "git-hash=unknown, git-branch=unknown"),
    Line("deepspeedai/DeepSpeed#4890", "PyTorch 2.1 (ProcessGroupWrapper's INFO)",
         "[I ProcessGroupWrapper.cpp:562] [Rank 0] Running collective: CollectiveFingerPrint(SequenceNumber=1277, "
         "OpType=ALLREDUCE, TensorShape=[], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), "
         "device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), "
         "memory_format=(nullopt)))"),
    Line("jax-ml/jax#27354", "XLA 2025 (rematerialization: a compile-time estimate, no allocation failed)",
         "2025-03-23 20:28:49.804627: W external/xla/xla/hlo/transforms/simplifiers/hlo_rematerialization.cc:3021] "
         "Can't reduce memory use below 0B (0 bytes) by rematerialization; only reduced to 1.25TiB (1374521760000 "
         "bytes), down from 1.25TiB (1374521760000 bytes) originally"),
)

NEGATIVE += (
    Line("NVIDIA/TensorRT-LLM#448", "NCCL 2.19.3 (its banner)", "NCCL version 2.19.3+cuda12.3"),
    Line("NVIDIA/TensorRT-LLM#448", "NCCL 2.19.3 (INFO)",
         "archimedes-open-api-70b-1325343-5875b79c44-lzlpt:6859:6969 [0] NCCL INFO cudaDriverVersion 12020"),
    Line("NVIDIA/nccl#629", "NCCL 2.1x (INFO trace)",
         "A03-R28-I49-2-6000166:104934:105018 [0] NCCL INFO include/net.h:28 -> 2"),
    Line("Zuricho/ParallelFold#23", "jaxlib 0.3.15 (pinned host memory: the host's, not the GPU's)",
         "2022-08-17 11:26:20.226278: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:796] "
         "failed to alloc 12524123136 bytes on host: CUDA_ERROR_OPERATING_SYSTEM: OS call failed or operation not "
         "supported on this OS"),
    Line("Zuricho/ParallelFold#23", "jaxlib 0.3.15 (pinned host memory)",
         "2022-08-17 11:26:20.226316: W external/org_tensorflow/tensorflow/core/common_runtime/device/"
         "device_host_allocator.h:46] could not allocate pinned host memory of size: 12524123136"),
    Line("flatironinstitute/nemos#345", "XLA BFC allocator (a retry XLA says is no failure)",
         "2025-05-18 21:59:55.086788: W external/xla/xla/tsl/framework/bfc_allocator.cc:310] Allocator (GPU_0_bfc) ran "
         "out of memory trying to allocate 3.37GiB with freed_by_count=0. The caller indicates that this is not a "
         "failure, but this may mean that there could be performance gains if more memory were available."),
    Line("PKU-YuanGroup/Video-LLaVA#13", "the issue's title (a person's words, not the program's)",
         "loading checkpoint shards 0% . Killed ? help"),
    Line("zai-org/ChatGLM-6B#7", "a person describing the failure",
         "Loading checkpoint shards:  62%, then progress be killed"),
    Line("tloen/alpaca-lora#546", "a person describing the failure",
         "Yes increasing memory solved the issue, I would suggest the error message be changed for this case to "
         "reflect the cause and not just \"killed\" ."),
    Line("oobabooga/textgen#297", "a person's words (\"out of memory errors\")",
         "after generating some tokens asking to produce code I get out of memory errors"),
    Line("brucepro/Memoir#108", "the issue's title (a person's words)", "Out of memory very quickly"),
    Line("continuedev/continue#9649", "Ollama 2026 (the host's memory, not a GPU's)",
         "\"model requires more system memory (5.3 GiB) than is available (5.3 GiB)\""),
    Line("open-webui/open-webui#4625", "Ollama's stream: a model's own words in a log",
         "{\"model\":\"llama3.1:latest\",\"created_at\":\"2024-08-15T12:27:35.0847861Z\",\"message\":{\"role\":"
         "\"assistant\",\"content\":\" training\"},\"done\":false} Chat.svelte:862:15"),
    Line("stepfun-ai/Step-Video-T2V#29", "diffusers' tqdm (a finished progress bar)",
         "Loading pipeline components...: 100%|█████████████████████████████████████████████████████████████████████"
         "████████████████████| 2/2 [00:37<00:00, 18.62s/it]"),
)

KERNEL_NEGATIVE: tuple[Line, ...] = (
    Line(_GPUD_119, "driver 535 (the GPU's identity, no Xid)",
         "[Sun Feb 23 16:24:18 2025] NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d"),
    Line(_GPUD_119, "driver 535 (rate limiting)",
         "[Sun Feb 23 16:24:36 2025] NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of "
         "every 30).  The GPU likely needs to be reset."),
    Line(_GPUD_119, "driver 535 (GSP RPC history)",
         "[Sun Feb 23 16:24:18 2025] NVRM: GPU4 GSP RPC buffer contains function 103 (GSP_RM_ALLOC) and data "
         "0x0000000000002081 0x0000000000000004."),
    Line(_GPUD_DMESG, "gpud's negative case", "NVRM: Xid error: xyz, invalid data"),
    Line(_NVS_CSV, "NVSentinel's negative case (no PCI address)", "NVRM: Xid : 32, pid=2280636"),
    Line(_NVS_CSV, "NVSentinel's negative case (no number)", "NVRM: Xid (PCI:0000:66:00): abc, pid=2280636"),
)
