/*
 * A stand-in CUDA driver (libcuda.so.1) for the releases of PyTorch that open the driver
 * themselves: up to 2.7, expandable segments `dlopen("libcuda.so.1")` and look up their cu*
 * functions by name (c10/cuda/driver_api.cpp); from 2.8 on they ask the runtime
 * (cudaGetDriverEntryPoint), which the stand-in runtime answers itself.
 *
 * Each function goes to the stand-in runtime's own (virtual_cuda.c, through
 * hipmem_vcuda_driver_function), so both paths reach one device. The replay driver links this
 * library, so that PyTorch's dlopen finds it loaded (by its soname) before any real driver a
 * GPU host has. Functions a replay never calls (IPC, multicast) are present and refused.
 */
#include <cuda.h>

#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

void* hipmem_vcuda_driver_function(const char* symbol);

#define FORWARD(name, params, args)                                             \
  EXPORT CUresult name params {                                                 \
    void* function = hipmem_vcuda_driver_function(#name);                       \
    return function ? ((CUresult(*) params)function) args : CUDA_ERROR_NOT_SUPPORTED; \
  }

FORWARD(cuGetErrorString, (CUresult error, const char** text), (error, text))
FORWARD(cuDeviceGet, (CUdevice * device, int ordinal), (device, ordinal))
FORWARD(cuDeviceGetAttribute, (int* value, CUdevice_attribute attribute, CUdevice device),
        (value, attribute, device))
FORWARD(cuMemGetAllocationGranularity,
        (size_t * granularity, const CUmemAllocationProp* prop,
         CUmemAllocationGranularity_flags option),
        (granularity, prop, option))
FORWARD(cuMemAddressReserve,
        (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,
         unsigned long long flags),
        (ptr, size, alignment, addr, flags))
FORWARD(cuMemAddressFree, (CUdeviceptr ptr, size_t size), (ptr, size))
FORWARD(cuMemCreate,
        (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop,
         unsigned long long flags),
        (handle, size, prop, flags))
FORWARD(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))
FORWARD(cuMemMap,
        (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
         unsigned long long flags),
        (ptr, size, offset, handle, flags))
FORWARD(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))
FORWARD(cuMemSetAccess,
        (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count),
        (ptr, size, desc, count))

/* Present and refused, whatever their arguments (their prototypes vary between CUDAs). */
#define NOT_SUPPORTED(name)                                          \
  EXPORT CUresult vcuda_driver_stub_##name(void) __asm__(#name);     \
  CUresult vcuda_driver_stub_##name(void) { return CUDA_ERROR_NOT_SUPPORTED; }

NOT_SUPPORTED(cuMemExportToShareableHandle)
NOT_SUPPORTED(cuMemImportFromShareableHandle)
NOT_SUPPORTED(cuMemsetD32Async)
NOT_SUPPORTED(cuStreamWriteValue32)
NOT_SUPPORTED(cuMulticastAddDevice)
NOT_SUPPORTED(cuMulticastBindMem)
NOT_SUPPORTED(cuMulticastCreate)
