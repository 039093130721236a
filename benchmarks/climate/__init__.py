"""Climate segmentation reference benchmark (Tiramisu on CAM5-like HDF5 files, the original study's second workload)."""
