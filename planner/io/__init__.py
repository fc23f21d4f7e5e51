"""Other systems' formats: importers (nvidia-smi text, the Alibaba openb trace, a Kubernetes fleet)
turn them into gpuplan inputs; exporters write plans as workbooks and CSV, Kubernetes objects, NVIDIA
MIG manager configurations and the cluster map."""
