/* cuDNN as a recording needs it: a version, handles, error texts. A recording turns cuDNN off
   in PyTorch (replay/record/boot says why), so nothing here chooses an algorithm. */
EXPORT size_t cudnnGetVersion(void) { return 91900; }

EXPORT size_t cudnnGetCudartVersion(void) { return 13000; }

EXPORT int cudnnCreate(void** handle) {
  if (!handle) return 3; /* CUDNN_STATUS_BAD_PARAM */
  *handle = stub_object();
  return 0;
}
