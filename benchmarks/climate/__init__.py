"""Climate segmentation reference benchmark (Tiramisu on CAM5-like HDF5 files)."""
