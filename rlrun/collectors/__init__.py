"""Sources of batches: collectors (one process, VMAS, worker processes, Ray) and the dataset source."""
