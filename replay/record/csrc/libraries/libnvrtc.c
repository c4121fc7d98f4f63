/* NVRTC as a recording needs it: PyTorch compiles some elementwise kernels at run time
   (jiterator); the compile succeeds and gives an empty image, which the stand-in driver loads
   and whose kernels it launches as nothing. */
EXPORT int nvrtcVersion(int* major, int* minor) {
  if (major) *major = 13;
  if (minor) *minor = 0;
  return 0;
}

EXPORT int nvrtcGetNumSupportedArchs(int* count) {
  if (count) *count = 1;
  return 0;
}

EXPORT int nvrtcGetSupportedArchs(int* archs) {
  if (archs) archs[0] = 90;
  return 0;
}

EXPORT int nvrtcCreateProgram(void** program, ...);
int nvrtcCreateProgram(void** program, ...) {
  if (!program) return 5; /* NVRTC_ERROR_INVALID_INPUT */
  *program = stub_object();
  return 0;
}

#define ONE_BYTE(size_name, copy_name)                   \
  EXPORT int size_name(void* program, size_t* size) {    \
    (void)program;                                       \
    if (size) *size = 1;                                 \
    return 0;                                            \
  }                                                      \
  EXPORT int copy_name(void* program, char* out) {       \
    (void)program;                                       \
    if (out) out[0] = 0;                                 \
    return 0;                                            \
  }

ONE_BYTE(nvrtcGetPTXSize, nvrtcGetPTX)
ONE_BYTE(nvrtcGetCUBINSize, nvrtcGetCUBIN)
ONE_BYTE(nvrtcGetProgramLogSize, nvrtcGetProgramLog)
