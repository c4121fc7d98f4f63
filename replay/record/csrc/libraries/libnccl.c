/* NCCL as a recording needs it: a version to print. torch.distributed is not recorded. */
EXPORT int ncclGetVersion(int* version) {
  if (version) *version = 22809;
  return 0;
}
