/*
 * A stand-in NVML (libnvidia-ml.so.1) for the virtual GPU's driver process.
 *
 * Why: when PyTorch's allocator refuses an allocation, it writes the out-of-memory message with
 * the GPU's processes from NVML (reportProcessMemoryInfo in CUDACachingAllocator.cpp): it
 * dlopens "libnvidia-ml.so.1", asks for the device whose PCI bus id the runtime reports, and
 * asserts that NVML knows it. On a machine with no NVIDIA driver there is no NVML and that part
 * of the message is skipped. On a machine with one (a GPU host), the real NVML does not know the
 * virtual GPU, and the assert ends the replay at its first refusal (seen on the H200).
 *
 * The driver is linked to this library, so it is loaded at start under the soname
 * libnvidia-ml.so.1, and PyTorch's dlopen of that name returns it instead of the real one. It
 * knows one device with no processes: the message then reads as on a machine without NVML.
 * It exports what c10's DriverAPI looks up (C10_NVML_DRIVER_API in c10/cuda/driver_api.h,
 * PyTorch 2.4-2.14); anything beyond answering that one question says "not supported".
 */
#include <stddef.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3 };

typedef int nvmlReturn_t;
typedef struct VirtualNvmlDevice* nvmlDevice_t;

static struct VirtualNvmlDevice {
  int unused;
} g_device;

EXPORT nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }

EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id,
                                                     nvmlDevice_t* device) {
  if (pci_bus_id == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_device; /* the one device: the virtual GPU */
  return NVML_SUCCESS;
}

/* No process holds memory on the virtual GPU but the replay, which PyTorch counts itself. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                         unsigned int* info_count, void* infos) {
  (void)infos;
  if (device != &g_device || info_count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *info_count = 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (version == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *version = 13000;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                        int* type) {
  (void)device, (void)link, (void)type;
  return NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        void* pci) {
  (void)device, (void)link, (void)pci;
  return NVML_ERROR_NOT_SUPPORTED;
}

/* PyTorch 2.13 asserts success here when it maps an expandable segment (to pick the handle
   type): the answer of a GPU outside any NVLink fabric. The struct (nvmlGpuFabricInfoV_t)
   starts with its version word, whose low 24 bits are its size; all after it zero means
   status NVML_SUCCESS and state NVML_GPU_FABRIC_STATE_NOT_SUPPORTED. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void* info) {
  if (device != &g_device || info == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int version;
  memcpy(&version, info, sizeof version);
  size_t const size = version & 0xFFFFFFu;
  if (size <= sizeof version || size > 4096) return NVML_ERROR_INVALID_ARGUMENT;
  memset((char*)info + sizeof version, 0, size - sizeof version);
  return NVML_SUCCESS;
}
