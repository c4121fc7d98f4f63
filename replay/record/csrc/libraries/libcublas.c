/* cuBLAS as a recording needs it: handles, and the answers PyTorch reads back. PyTorch gives
   each handle its workspace from its own allocator (cublasSetWorkspace), so the workspace is
   a request the recording sees; what the real cuBLAS allocates for itself through the driver
   (per handle: 1 KiB + 128 KiB + 64 MiB on an H100) never reaches PyTorch's allocator. */
EXPORT int cublasCreate_v2(void** handle) {
  if (!handle) return 7; /* CUBLAS_STATUS_INVALID_VALUE */
  *handle = stub_object();
  return 0;
}

EXPORT int cublasGetVersion_v2(void* handle, int* version) {
  (void)handle;
  if (version) *version = 130101;
  return 0;
}

EXPORT int cublasGetMathMode(void* handle, int* mode) {
  (void)handle;
  if (mode) *mode = 0;
  return 0;
}

EXPORT int cublasGetPointerMode_v2(void* handle, int* mode) {
  (void)handle;
  if (mode) *mode = 0;
  return 0;
}

EXPORT int cublasGetStream_v2(void* handle, void** stream) {
  (void)handle;
  if (stream) *stream = NULL;
  return 0;
}
