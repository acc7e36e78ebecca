"""Pure parsers for what a GPU workload says in its own log: each signal a typed record.

One module per signal family, each with its records, its patterns and the words that make a line
worth parsing; the line formats are quoted in each module's docstring, as PyTorch, TensorFlow, JAX,
NCCL, torchrun, DeepSpeed and vLLM print them (the test fixtures in ``tests/support/log_lines.py`` and
``tests/support/recent_lines.py`` quote real lines from public issues and peers' fixtures, with
project and version):

* :mod:`.line`: what every signal shares: the record base, a line's engine or kubelet timestamp
  and launcher prefixes, the scan bound, and the newest whole lines of a log;
* :mod:`.cuda`: CUDA out of memory (PyTorch with its private pools and the GPU's other processes,
  TensorFlow, JAX/XLA on the device only where the line says so, the runtime) and CUDA faults with
  their numbers;
* :mod:`.nccl`: ProcessGroupNCCL's watchdog (timeouts, and asynchronous errors as their own signal)
  and NCCL's own WARN (socket calls' peer, error and errno), INFO and result codes with the version;
* :mod:`.process`: how a process ended (a traceback's exception, ``Killed`` even after a progress
  bar, a launcher's report of its worker: torchrun's exit and Root Cause block, vLLM V1's worker
  death, DeepSpeed's return code) and torchrun's rendezvous;
* :mod:`.scan`: one line (:func:`~.scan.parse_line`) and a whole log (:func:`~.scan.scan_log`).

Bounded: a line longer than ``MAX_SCAN_CHARS`` is scanned at its head and its tail only (a
progress bar redrawn with ``\\r`` makes lines of megabytes), a traceback is followed at most
``TRACEBACK_MAX_LINES`` lines, and :func:`~.scan.scan_log` stops after ``max_signals`` records.
Nothing here raises on any text.
"""
