"""Data in and out: gpuplan's own files (``files``: the cluster, workloads, policy and plan, read with
one-line errors that name the file and the field, and written back); other systems' formats: importers
(nvidia-smi text, the Alibaba openb trace, a Kubernetes fleet) turn them into gpuplan inputs; exporters
write plans as workbooks and CSV, Kubernetes objects, NVIDIA MIG manager configurations and the cluster
map. The files and importers sit at the bottom of the planner's layers, the exporters near the top."""
