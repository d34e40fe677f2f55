// engine::device: how much memory the device that holds the model and its KV cache has, as
// ggml's backends report it (ggml_backend_dev_memory): the GPUs when the model is offloaded,
// else the CPU, whose "device" memory is the host's physical memory. Read by the startup
// memory plan (scheduler/memory_plan.h).
// Thread safety: read_device_memory may be called from any thread. Ownership: none.
#pragma once

#include <cstdint>
#include <string>

namespace lineage::engine {

struct device_memory {
    std::string name;          ///< e.g. "CUDA0", "CUDA0+CUDA1", or "CPU"
    bool gpu = false;          ///< true when `name` is one or more GPUs (discrete or integrated)
    uint64_t free_bytes = 0;   ///< free memory now, bytes (the CPU reports its total: ggml's own rule)
    uint64_t total_bytes = 0;  ///< total memory, bytes
};

/** The memory of the GPUs ggml found, summed, when `want_gpu` and there is at least one; else
 *  the CPU device's (host physical memory). Call it before the model is loaded to get what the
 *  weights may take too. Never fails: a backend that reports nothing gives zeros. */
device_memory read_device_memory(bool want_gpu);

}  // namespace lineage::engine
