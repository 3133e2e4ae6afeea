"""The columns of a calibration table (``kvsim calibrate``): one row per grid point."""

ROW_COLUMNS = (
    "batch_size",
    "context_tokens",
    "block_size_tokens",
    "contiguous_s",
    "paged_s",
    "kv_bytes",
)
