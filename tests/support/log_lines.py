"""Real log lines of GPU workloads, as quoted in public issues, for the log-signal parsers and the
containers and pods that print them.

Each :class:`Quoted` names where it was published (``owner/repo#issue``), the version of the
program that printed it (as the issue states it, else the wording's era), and the text. Host
names, paths and addresses are the issue's own; nothing here is invented except where
``adapted`` says what changed. Tests write these into logs (files, containers, pods); the
parsers' expected fields are asserted in ``tests/unit/parsing/test_logsignals.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ALL", "Quoted"]


@dataclass(frozen=True)
class Quoted:
    source: str
    version: str
    text: str
    adapted: str = ""


# --- CUDA out of memory -------------------------------------------------------------------

TORCH_OOM_NEW = Quoted(
    "pytorch/pytorch#16417 (comment 2024-03-13)", "PyTorch >= 2.2 wording (expandable_segments hint)",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity "
    "of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in "
    "use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

TORCH_OOM_CAPACTY = Quoted(
    "wxian3/NeuroLens#2", "PyTorch 2.1 wording (\"capacty\", max_split_size_mb hint)",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 55.57 GiB. GPU 0 has a total capacty "
    "of 12.00 GiB of which 9.02 GiB is free. Of the allocated memory 984.52 MiB is allocated by PyTorch, and "
    "463.48 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
    "PYTORCH_CUDA_ALLOC_CONF")

TORCH_OOM_OLD = Quoted(
    "pytorch/pytorch#59778", "PyTorch 1.x (2021)",
    "CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; 781.59 MiB already "
    "allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)")

TORCH_OOM_CACHED = Quoted(
    "pytorch/pytorch#16417", "PyTorch 1.0 (2019: \"cached\")",
    "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB "
    "already allocated; 9.28 GiB free; 4.68 MiB cached)")

TF_OOM_TENSOR = Quoted(
    "keras-team/keras#9643", "TensorFlow 1.x",
    "ResourceExhaustedError: OOM when allocating tensor with shape[128,128,109,109] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc")

TF_OOM_STREAM_EXECUTOR = Quoted(
    "tensorflow/tensorflow#30912", "TensorFlow 1.14",
    "2019-07-21 23:23:06.228049: E tensorflow/stream_executor/cuda/cuda_driver.cc:828] failed to allocate "
    "32.00M (33554432 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory")

TF_OOM_HOST = Quoted(
    "gaycodegal/craiyon-low-vram-easy#1", "JAX/XLA stream executor (2022): pinned host memory, not the GPU",
    "2022-07-03 15:46:53.245176: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:802] "
    "failed to alloc 782758144 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory")

CUDA_ERROR_OOM = Quoted(
    "junjie18/CMT#15", "spconv tensorview (2023)",
    "RuntimeError: CUDA error: out of memory")

# --- NCCL ---------------------------------------------------------------------------------

NCCL_WATCHDOG = Quoted(
    "NVIDIA/nccl#1409", "PyTorch 2.4 (ProcessGroupNCCL.cpp:607/1664), CUDA 12.6",
    "[rank7]:[E816 01:45:40.183009389 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, NumelOut=5056, Timeout(ms)=600000) ran for "
    "600026 milliseconds before timing out.\n"
    "[rank7]:[E816 01:45:40.184373931 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 7] Exception (either "
    "an error or timeout) detected by watchdog at work: 80078, last enqueued NCCL work: 80078, last completed "
    "NCCL work: 80077.")

NCCL_WATCHDOG_OLD = Quoted(
    "pytorch/pytorch#118369", "PyTorch 1.x/2.0 (no Numel, no [rankN]: prefix)",
    "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, "
    "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25624887 milliseconds before timing out.")

NCCL_WATCHDOG_26 = Quoted(
    "snowflakedb/ArcticTraining#219", "PyTorch 2.6+ (ProcessGroupNCCL.cpp:2268, PG GUID)",
    "[rank5]:[E626 16:48:25.440238649 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 5]  failure "
    "detected by watchdog at work sequence id: 120049 PG status: last enqueued work: 120051, last completed "
    "work: 120048\n"
    "[rank3]:[E626 16:48:25.440250129 ProcessGroupNCCL.cpp:684] [Rank 3] Some NCCL operations have failed or "
    "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
    "corrupted/incomplete data.")

NCCL_BLOCKING_WAIT = Quoted(
    "huggingface/diffusers#12422", "PyTorch 2.5+ (ProcessGroupNCCL.cpp:756)",
    "[rank1]:[E1002 18:16:40.662691402 ProcessGroupNCCL.cpp:756] [Rank 1] Work WorkNCCL(SeqNum=2521, "
    "OpType=ALLREDUCE, NumelIn=160672064, NumelOut=160672064, Timeout(ms)=600000) timed out in blocking wait.")

NCCL_WARN_SOCKET = Quoted(
    "NVIDIA/nccl#975", "NCCL 2.1x",
    "n122-246-085:12251:12400 [5] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to "
    "fe80::966d:ae03:a2:8cf0%ib1<17943> failed : Software caused connection abort")

NCCL_WARN_IBV = Quoted(
    "NVIDIA/nccl-tests#206", "NCCL 2.19+ (ibv_reg_mr_iova2), as the issue's title quotes it (no header)",
    "misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory")

NCCL_WARN_CUDA = Quoted(
    "PKU-YuanGroup/Open-Sora-Plan#386", "NCCL 2.1x",
    "ins-7df6eojsifuykig9:3018451:3018451 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'")

NCCL_WARN_OFI = Quoted(
    "NVIDIA/nccl#563", "aws-ofi-nccl under NCCL 2.x, pdsh host prefixes",
    "10.0.87.143: 10.0.87.143: ip-10-0-87-143:149:298 [5] register_mr_buffers:465 NCCL WARN NET/OFI Unable to "
    "register memory (type = 1) for device 0. RC: 12, Error: Cannot allocate memory")

NCCL_WARN_CONNECT = Quoted(
    "pytorch/pytorch#38702", "NCCL 2.4.8, as the issue's description quotes it (no header)",
    "NCCL WARN Connect to 10.38.10.112<21724> failed : Connection refused")

NCCL_SYSTEM_ERROR = Quoted(
    "NVIDIA/nccl#875", "PyTorch 1.13, NCCL 2.10.3",
    "RuntimeError: NCCL error in: /home/builder/mc3/envs/pytorch-build/envs/pytorch-build/conda-bld/"
    "pytorch_1673601922403/work/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system error, "
    "NCCL version 2.10.3")

NCCL_REMOTE_ERROR = Quoted(
    "tatsu-lab/stanford_alpaca#207", "NCCL 2.14.3 (the issue flattened several lines into one)",
    "[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. Due to the asynchronous nature "
    "of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. [E "
    "ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down. terminate "
    "called after throwing an instance of 'std::runtime_error' what(): NCCL error: remote process exited or "
    "there was a network error, NCCL version 2.14.3 ncclRemoteError: A call failed possibly due to a network "
    "error or a remote process exiting prematurely. Last error: NET/IB : Got completion from peer "
    "11.214.147.122<39138> with error 12, opcode 0, len 0, vendor err 129")

NCCL_INTERNAL_VLLM = Quoted(
    "vllm-project/vllm#798", "vLLM 0.1.x under Ray",
    "(LLMEngine pid=2347640, ip=10.58.226.15) ncclInternalError: Internal check failed.")

NCCL_UNHANDLED_CUDA = Quoted(
    "pytorch/pytorch#11756", "PyTorch 0.4/1.0",
    "RuntimeError: NCCL Error 1: unhandled cuda error")

NCCL_COMM_INIT = Quoted(
    "NVIDIA/nccl#1814", "NCCL 2.2x (nvmlDev, commId)",
    "hostname-test:984:1257 [4] NCCL INFO comm 0x557fe785f7a0 rank 36 nranks 64 cudaDev 4 nvmlDev 4 busId 9b000 "
    "commId 0x5ae77eb5ea4ec1ee - Init COMPLETE")

NCCL_COMM_INIT_OLD = Quoted(
    "NVIDIA/nccl#629", "NCCL 2.1x (no nvmlDev)",
    "A03-R28-I49-3-9000018:193027:193119 [7] NCCL INFO comm 0x7fdf08000d00 rank 15 nranks 16 cudaDev 7 busId "
    "e7000 - Init COMPLETE")

# --- launchers ----------------------------------------------------------------------------

TORCHRUN_RENDEZVOUS = Quoted(
    "meta-pytorch/torchx#492", "torch.distributed.elastic (2022) under Ray",
    "ray/0 (CommandActor pid=494406) INFO:torch.distributed.elastic.agent.server.api:[] Rendezvous complete for "
    "workers. Result:\n"
    "ray/0 (CommandActor pid=494406)   restart_count=0\n"
    "ray/0 (CommandActor pid=494406)   master_addr=tristanr-arch2\n"
    "ray/0 (CommandActor pid=494406)   master_port=48089\n"
    "ray/0 (CommandActor pid=494406)   group_rank=0\n"
    "ray/0 (CommandActor pid=494406)   group_world_size=2\n"
    "ray/0 (CommandActor pid=494406)   local_ranks=[0]\n"
    "ray/0 (CommandActor pid=494406)   role_ranks=[0]\n"
    "ray/0 (CommandActor pid=494406)   global_ranks=[0]\n"
    "ray/0 (CommandActor pid=494406)   role_world_sizes=[2]\n"
    "ray/0 (CommandActor pid=494406)   global_world_sizes=[2]\n"
    "ray/0 (CommandActor pid=494406)\n"
    "ray/0 (CommandActor pid=494406) INFO:torch.distributed.elastic.agent.server.api:[] Starting worker group")

TORCHRUN_CHILD_FAILED = Quoted(
    "meta-llama/llama#856", "PyTorch 2.1 torchrun",
    "[2023-10-13 17:40:02,544] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
    "local_rank: 0 (pid: 62498) of binary: /home/znr/miniconda3/envs/llama/bin/python")

VLLM_WORKER_DIED = Quoted(
    "vllm-project/vllm#15295", "vLLM 0.8 (torch 2.6.0)",
    "Worker VllmWorkerProcess pid 000000 died, exit code: -15")

# --- CUDA faults --------------------------------------------------------------------------

ILLEGAL_ADDRESS = Quoted(
    "evo-design/evo#136", "PyTorch 2.x wording (TORCH_USE_CUDA_DSA hint)",
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
    "be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")

ECC_VLLM = Quoted(
    "vllm-project/vllm#5222", "vLLM 0.4 (2024)",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered")

ECC_TF = Quoted(
    "nagadit/DeepFaceLab_Linux#89", "TensorFlow 1.x stream executor",
    "F tensorflow/stream_executor/lib/statusor.cc:34] Attempting to fetch value instead of handling error "
    "Internal: failed initializing StreamExecutor for CUDA device ordinal 0: Internal: failed call to "
    "cuDevicePrimaryCtxRetain: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered")

DEVICE_ASSERT = Quoted(
    "layumi/Person_reID_baseline_pytorch#372", "PyTorch 1.x (THCUNN)",
    "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: cunn_ClassNLLCriterion_updateOutput_kernel: block: "
    "[0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
    "Traceback (most recent call last):\n"
    "  File \"train.py\", line 577, in <module>\n"
    "    num_epochs=opt.total_epoch)\n"
    "  File \"train.py\", line 379, in train_model\n"
    "    running_loss += loss.item() * now_batch_size\n"
    "RuntimeError: CUDA error: device-side assert triggered")

GPU_LOST = Quoted(
    "JosephKJ/OWOD#81", "nvidia-smi (2021)",
    "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the system to recover "
    "this GPU")

NO_DEVICE = Quoted(
    "lelechen63/ATVGnet#4", "PyTorch 1.0 (THC)",
    "RuntimeError: cuda runtime error (38) : no CUDA-capable device is detected at "
    "/pytorch/aten/src/THC/THCGeneral.cpp:74")

DRIVER_MISMATCH = Quoted(
    "tensorflow/tensorflow#52530", "NVML 470 (2021)",
    "Failed to initialize NVML: Driver/library version mismatch")

# --- process ends -------------------------------------------------------------------------

KILLED_SHELL = Quoted(
    "chenhsuanlin/spatial-transformer-GAN#35", "bash reporting its child's SIGKILL",
    "./train.sh: line 1:  7364 Killed                  python3 train_Donly.py --name=D0 --warpN=0 --pertFG=0.2")

KILLED_BARE = Quoted(
    "CharlesShang/FastMaskRCNN#172", "the shell's bare report (markdown bold in the issue removed)",
    "Killed", adapted="the issue shows it as **Killed**")

TERMINATE = Quoted(
    "huggingface/accelerate#2174", "PyTorch 2.0 (watchdog abort)",
    "[E ProcessGroupNCCL.cpp:916] [Rank 2] NCCL watchdog thread terminated with exception: [Rank 2] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=48490, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=1800000) ran for 1800781 milliseconds before timing out.\n"
    "terminate called after throwing an instance of 'std::runtime_error'")

TRACEBACK_DATALOADER = Quoted(
    "hezhangsprinter/DCPDN#12", "PyTorch 0.4 (Python 2.7)",
    "Traceback (most recent call last):\n"
    "  File \"train.py\", line 210, in <module>\n"
    "    val_target_cpu, val_input_cpu = val_target_cpu.float().cuda(), val_input_cpu.float().cuda()\n"
    "  File \"/home/littlemonster/anaconda3/envs/pic/lib/python2.7/site-packages/torch/utils/data/dataloader.py\", "
    "line 175, in handler\n"
    "    _error_if_any_worker_fails()\n"
    "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.")

ALL: tuple[Quoted, ...] = tuple(v for k, v in dict(globals()).items() if isinstance(v, Quoted))
