// engine::device: the device's memory through ggml's backend registry; see device.h.
#include "engine/device.h"

#include "engine/model.h"

#include "ggml-backend.h"

namespace lineage::engine {

device_memory read_device_memory(bool want_gpu) {
    init_backends();  // a GGML_BACKEND_DL engine has no devices before its modules are loaded
    device_memory gpus;
    gpus.gpu = true;
    device_memory cpu{"CPU", false, 0, 0};
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        size_t free = 0;
        size_t total = 0;
        ggml_backend_dev_memory(dev, &free, &total);
        const auto type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            gpus.name += (gpus.name.empty() ? "" : "+") + std::string(ggml_backend_dev_name(dev));
            gpus.free_bytes += free;
            gpus.total_bytes += total;
        } else if (type == GGML_BACKEND_DEVICE_TYPE_CPU && cpu.total_bytes == 0) {
            cpu.free_bytes = free;
            cpu.total_bytes = total;
        }
    }
    return want_gpu && !gpus.name.empty() ? gpus : cpu;
}

}  // namespace lineage::engine
