"""Exporters of plans and capacity gaps: spreadsheet workbooks and CSV, Kubernetes objects per round,
NVIDIA MIG manager (mig-parted) configurations, and the cluster map (SVG or HTML)."""
