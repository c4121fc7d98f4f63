/* The CUDA driver as a recording needs it, beside the expandable segments' cuMem* calls that
   go to the stand-in runtime (replay/virtual/vcuda/virtual_libcuda.c, included first): a
   primary context that is always active, modules and kernels that load from any image and
   launch as nothing. cuBLAS, cuDNN and NVRTC's kernels reach the driver this way. */
#include <cuda.h>

static int record_attribute(int which) {
  int value = 0;
  CUresult (*get)(int*, int, int) =
      (CUresult(*)(int*, int, int))hipmem_vcuda_driver_function("cuDeviceGetAttribute");
  if (get) get(&value, which, 0);
  return value;
}

EXPORT CUresult cuInit(unsigned flags) {
  (void)flags;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext* context) {
  static char primary;
  if (!context) return CUDA_ERROR_INVALID_VALUE;
  *context = (CUcontext)&primary;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext context) {
  (void)context;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = 0;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned* flags, int* active) {
  (void)device;
  if (flags) *flags = 0;
  if (active) *active = 1;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  (void)device;
  return cuCtxGetCurrent(context);
}

EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  (void)image;
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  *module = (CUmodule)stub_object();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned count,
                                   CUjit_option* options, void** values) {
  (void)count, (void)options, (void)values;
  return cuModuleLoadData(module, image);
}

EXPORT CUresult cuModuleLoad(CUmodule* module, const char* path) {
  return cuModuleLoadData(module, path);
}

EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  (void)module, (void)name;
  if (!function) return CUDA_ERROR_INVALID_VALUE;
  *function = (CUfunction)stub_object();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetAttribute(int* value, CUfunction_attribute which, CUfunction function) {
  (void)function;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  *value = which == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function,
                                                            int block_size, size_t shared) {
  (void)function, (void)shared;
  if (!blocks) return CUDA_ERROR_INVALID_VALUE;
  int per_sm = record_attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  *blocks = block_size > 0 && per_sm >= block_size ? per_sm / block_size : 1;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuLinkCreate_v2(unsigned count, CUjit_option* options, void** values,
                                CUlinkState* state) {
  (void)count, (void)options, (void)values;
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  *state = (CUlinkState)stub_object();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuLinkComplete(CUlinkState state, void** image, size_t* size) {
  static char empty;
  (void)state;
  if (image) *image = &empty;
  if (size) *size = 1;
  return CUDA_SUCCESS;
}

/* Triton's launcher and utilities (torch.compile's kernels): limits, cluster occupancy, the
   launch itself (as nothing), and the check that each pointer argument is the device's. */

EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  (void)limit, (void)value;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  switch (limit) { /* the driver's defaults */
    case CU_LIMIT_STACK_SIZE: *value = 1024; break;
    case CU_LIMIT_PRINTF_FIFO_SIZE: *value = 1 << 20; break;
    case CU_LIMIT_MALLOC_HEAP_SIZE: *value = 8 << 20; break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction function,
                                             const CUlaunchConfig* config) {
  (void)function;
  if (!clusters || !config) return CUDA_ERROR_INVALID_VALUE;
  unsigned blocks = 1;
  for (unsigned i = 0; i < config->numAttrs; i++)
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const CUlaunchAttributeValue* value = &config->attrs[i].value;
      blocks = value->clusterDim.x * value->clusterDim.y * value->clusterDim.z;
    }
  *clusters = record_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) / (int)(blocks ? blocks : 1);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction function, void** params,
                                 void** extra) {
  (void)function, (void)params, (void)extra;
  return config ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) { /* every pointer is the one device's memory */
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr*)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_CONTEXT: return cuCtxGetCurrent((CUcontext*)data);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned*)data = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int*)data = 0; break;
    default: break;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttributes(unsigned count, CUpointer_attribute* attributes,
                                       void** data, CUdeviceptr ptr) {
  if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; i++) {
    CUresult status = cuPointerGetAttribute(data[i], attributes[i], ptr);
    if (status != CUDA_SUCCESS) return status;
  }
  return CUDA_SUCCESS;
}
