/* cuBLASLt as a recording needs it: descriptors, and a heuristic that always finds one
   algorithm needing no workspace beyond the one PyTorch gives it from its own allocator. */
typedef struct {
  uint64_t data[8];
} StubMatmulAlgo;

typedef struct { /* cublasLtMatmulHeuristicResult_t */
  StubMatmulAlgo algo;
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
} StubHeuristicResult;

#define CREATE(name)                          \
  EXPORT int name(void** made, ...);          \
  int name(void** made, ...) {                \
    if (!made) return 7;                      \
    *made = stub_object();                    \
    return 0;                                 \
  }

CREATE(cublasLtCreate)
CREATE(cublasLtMatmulDescCreate)
CREATE(cublasLtMatrixLayoutCreate)
CREATE(cublasLtMatmulPreferenceCreate)

EXPORT int cublasLtMatmulAlgoGetHeuristic(void* handle, void* op, void* a, void* b, void* c,
                                          void* d, void* preference, int requested,
                                          StubHeuristicResult* results, int* returned) {
  (void)handle, (void)op, (void)a, (void)b, (void)c, (void)d, (void)preference;
  if (!results || !returned || requested < 1) return 7;
  memset(results, 0, sizeof *results * (size_t)requested);
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return 0;
}

EXPORT size_t cublasLtGetVersion(void) { return 130101; }

EXPORT size_t cublasLtGetCudartVersion(void) { return 13000; }
