"""The names of the runtime's metrics that another component reads: the Gateway API Inference Extension's
model-server protocol (GIE proposal 003) under ovserve's names, which the endpoint picker's `openvino` engine
config maps (operator/ovserve_operator/routing.py, docs/routing.md). Plain strings, apart from metrics.py: the
operator imports them without loading prometheus_client (4 MiB and ~40 modules it never uses)."""

KV_USAGE_RATIO = "ovserve_kv_cache_usage_ratio"
CACHE_CONFIG_INFO = "ovserve_kv_cache_config_info"
CACHE_BLOCK_SIZE_LABEL = "block_size"
CACHE_NUM_BLOCKS_LABEL = "num_blocks"
CACHE_PREFIX_LABEL = "enable_prefix_caching"
