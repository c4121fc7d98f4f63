/* cuDNN's convolution workspaces, as the GPU answered them (included by libcudnn.c).

   PyTorch runs a convolution on the first engine cuDNN's heuristic ranks and allocates that
   plan's workspace through its allocator (Conv_v8.cpp, run_conv_plan). The ranking is cuDNN's
   own, so the workspace comes from a table measured on the H200 under cuDNN 9.19
   (benchmarks/gpu_cudnn_convolution.py; replay/record/cudnn_table.py writes it as
   record_cudnn_convolutions.h). Its key is everything cuDNN is given but the batch size:

   - a batch size that was measured: its workspace;
   - between two measured ones: the nearer one's workspace, plus the slope between the two for
     each sample more or fewer (for one engine a workspace is a multiple of the batch size plus
     a small constant, so this is exact while the heuristic keeps its engine); where one of
     the two has none, the nearer one's in proportion to the batch size;
   - beyond them: the same from the two nearest;
   - a convolution the table has no key for: the median workspace of the three most alike ones
     it has (same operation, data type and grouping; then kernel and stride; then the nearest
     channels and image size), at this batch size, each in proportion to the two
     convolutions' tensors: an estimate.

   hipmem says how many plans were answered each way.

   An operation's tensors and convolution descriptor may be destroyed once it is finalized
   (cudnn-frontend's Operation owns them, not the graph), so the key is made then, and kept
   on the operation; the graph may be gone when plans are built, so the workspace is found
   when the heuristic is asked, and kept on the engine it gives. */

#define CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR 1
#define CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR 10
#define CONVOLUTION_OPERATIONS 3 /* forward, backward filter, backward data */
#define CUDNN_ATTR_CONVOLUTION_COMP_TYPE 100
#define CUDNN_ATTR_CONVOLUTION_DILATIONS 102
#define CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES 103
#define CUDNN_ATTR_CONVOLUTION_POST_PADDINGS 104
#define CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS 105
#define CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT 900
#define CUDNN_ATTR_TENSOR_STRIDES 903
/* Kept on a finalized convolution operation: its table key and batch size (names cuDNN never
   uses). */
#define HIPMEM_ATTR_CONVOLUTION_KEY 1000001
#define HIPMEM_ATTR_CONVOLUTION_BATCH 1000002
/* Kept on the engine a heuristic finds for a convolution: the plan's workspace, and how it
   was answered. */
#define HIPMEM_ATTR_CONVOLUTION_WORKSPACE 1000003
#define HIPMEM_ATTR_CONVOLUTION_ANSWER 1000004
#define HIPMEM_ATTR_CONVOLUTION_SHAPE 1000005
#define CONVOLUTION_KEY_CHARS 512

/* What makes two convolutions alike (replay/record/cudnn_table.py's row_shape). */
enum {
  SHAPE_OPERATION,
  SHAPE_DATA_TYPE,
  SHAPE_KERNEL,      /* the filter's elements per channel pair: 9 for 3x3 */
  SHAPE_STRIDE,      /* the first dimension's */
  SHAPE_GROUPED,     /* 1: fewer input channels per filter than the input has */
  SHAPE_IN_CHANNELS,
  SHAPE_OUT_CHANNELS,
  SHAPE_IN_ELEMENTS, /* per channel: H x W */
  SHAPE_OUT_ELEMENTS,
  SHAPE_FIELDS
};

typedef struct {
  const char* key;
  size_t first; /* its points in g_conv_points */
  size_t count;
  int64_t shape[SHAPE_FIELDS];
} ConvKey;

typedef struct {
  int64_t batch;
  int64_t workspace_bytes;
} ConvPoint;

#include "record_cudnn_convolutions.h"

/* Each operation's x, w, y and convolution descriptor attributes, by operation (forward,
   backward filter: x, dw, dy; backward data: dx, w, dy). */
static const int CONVOLUTION_X[CONVOLUTION_OPERATIONS] = {704, 716, 710};
static const int CONVOLUTION_W[CONVOLUTION_OPERATIONS] = {703, 715, 709};
static const int CONVOLUTION_Y[CONVOLUTION_OPERATIONS] = {705, 717, 711};
static const int CONVOLUTION_DESC[CONVOLUTION_OPERATIONS] = {702, 714, 708};

/* Which convolution operation a descriptor is, or -1. */
static int convolution_operation(const Descriptor* op) {
  int index = op->type - CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
  return index >= 0 && index < CONVOLUTION_OPERATIONS ? index : -1;
}

/* Appends "a,b,c" of an int64 attribute, from element `skip` on. */
static void append_int64s(char* key, size_t size, const Descriptor* from, int name, int skip) {
  const Attribute* a = find(from, name);
  for (int64_t i = skip; a && i < a->count; i++) {
    int64_t value;
    memcpy(&value, a->bytes + i * (int64_t)sizeof value, sizeof value);
    size_t used = strlen(key);
    snprintf(key + used, size - used, i > skip ? ",%lld" : "%lld", (long long)value);
  }
}

static int32_t int32_of(const Descriptor* from, int name) {
  const Attribute* a = find(from, name);
  int32_t value = -1;
  if (a) memcpy(&value, a->bytes, sizeof value);
  return value;
}

static int64_t int64_of(const Descriptor* from, int name, int64_t index) {
  const Attribute* a = find(from, name);
  int64_t value = 0;
  if (a && a->count > index) memcpy(&value, a->bytes + index * (int64_t)sizeof value, sizeof value);
  return value;
}

/* "type:dims:strides:alignment", less the first dimension for a batched tensor (x and y). */
static void append_tensor(char* key, size_t size, const Descriptor* tensor, int batched) {
  size_t used = strlen(key);
  snprintf(key + used, size - used, "%d:", int32_of(tensor, CUDNN_ATTR_TENSOR_DATA_TYPE));
  append_int64s(key, size, tensor, CUDNN_ATTR_TENSOR_DIMENSIONS, batched ? 1 : 0);
  strncat(key, ":", size - strlen(key) - 1);
  append_int64s(key, size, tensor, CUDNN_ATTR_TENSOR_STRIDES, 0);
  used = strlen(key);
  snprintf(key + used, size - used, ":%lld|",
           (long long)int64_of(tensor, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 0));
}

static void append_separated(char* key, size_t size, const Descriptor* from, int name) {
  append_int64s(key, size, from, name, 0);
  strncat(key, "|", size - strlen(key) - 1);
}

/* Keeps the table key of a convolution operation being finalized on it (see the top). */
static void keep_convolution_key(Descriptor* op) {
  int index = convolution_operation(op);
  if (index < 0) return;
  const Descriptor* x = descriptor_at(op, CONVOLUTION_X[index]);
  const Descriptor* w = descriptor_at(op, CONVOLUTION_W[index]);
  const Descriptor* y = descriptor_at(op, CONVOLUTION_Y[index]);
  const Descriptor* conv = descriptor_at(op, CONVOLUTION_DESC[index]);
  if (!x || !w || !y || !conv) return;
  char key[CONVOLUTION_KEY_CHARS];
  snprintf(key, sizeof key, "%d|", index);
  append_tensor(key, sizeof key, x, 1);
  append_tensor(key, sizeof key, w, 0);
  append_tensor(key, sizeof key, y, 1);
  size_t used = strlen(key);
  snprintf(key + used, sizeof key - used, "%d|", int32_of(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE));
  append_separated(key, sizeof key, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS);
  append_separated(key, sizeof key, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
  append_separated(key, sizeof key, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS);
  append_int64s(key, sizeof key, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 0);
  set(op, HIPMEM_ATTR_CONVOLUTION_KEY, CUDNN_TYPE_CHAR, (int64_t)strlen(key) + 1, key);
  set_int64(op, HIPMEM_ATTR_CONVOLUTION_BATCH, int64_of(x, CUDNN_ATTR_TENSOR_DIMENSIONS, 0));
  int64_t shape[SHAPE_FIELDS] = {index, int32_of(x, CUDNN_ATTR_TENSOR_DATA_TYPE), 1,
                                 int64_of(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 0), 0,
                                 int64_of(x, CUDNN_ATTR_TENSOR_DIMENSIONS, 1),
                                 int64_of(y, CUDNN_ATTR_TENSOR_DIMENSIONS, 1), 1, 1};
  const Attribute* dims = find(w, CUDNN_ATTR_TENSOR_DIMENSIONS);
  for (int64_t i = 2; dims && i < dims->count; i++) {
    shape[SHAPE_KERNEL] *= int64_of(w, CUDNN_ATTR_TENSOR_DIMENSIONS, i);
    shape[SHAPE_IN_ELEMENTS] *= int64_of(x, CUDNN_ATTR_TENSOR_DIMENSIONS, i);
    shape[SHAPE_OUT_ELEMENTS] *= int64_of(y, CUDNN_ATTR_TENSOR_DIMENSIONS, i);
  }
  shape[SHAPE_GROUPED] = shape[SHAPE_IN_CHANNELS] != int64_of(w, CUDNN_ATTR_TENSOR_DIMENSIONS, 1);
  set(op, HIPMEM_ATTR_CONVOLUTION_SHAPE, CUDNN_TYPE_INT64, SHAPE_FIELDS, shape);
}

static int compare_key(const void* wanted, const void* entry) {
  return strcmp((const char*)wanted, ((const ConvKey*)entry)->key);
}

/* How a workspace was answered: from a measured batch size, from others of the same
   convolution, or for a convolution the table lacks. Plans are counted by answer
   (hipmem_record_cudnn_convolutions gives the counts to the boot). */
enum { MEASURED, FROM_OTHER_BATCH_SIZES, NOT_MEASURED, ANSWERS };
static int64_t g_convolutions[ANSWERS];

/* The workspace at `batch` on the line through two measured points, from the nearer one. */
static int64_t on_line(const ConvPoint* a, const ConvPoint* b, const ConvPoint* near,
                       int64_t batch) {
  int64_t slope = (b->workspace_bytes - a->workspace_bytes) / (b->batch - a->batch);
  int64_t bytes = near->workspace_bytes + slope * (batch - near->batch);
  return bytes > 0 ? bytes : 0;
}

static int64_t measured_workspace(const ConvKey* entry, int64_t batch, int* answer) {
  const ConvPoint* points = g_conv_points + entry->first;
  size_t above = 0;
  while (above < entry->count && points[above].batch < batch) above++;
  *answer = MEASURED;
  if (above < entry->count && points[above].batch == batch) return points[above].workspace_bytes;
  *answer = FROM_OTHER_BATCH_SIZES;
  if (entry->count == 1) return points[0].workspace_bytes * batch / points[0].batch;
  if (above == 0) return on_line(&points[0], &points[1], &points[0], batch);
  if (above == entry->count)
    return on_line(&points[above - 2], &points[above - 1], &points[above - 1], batch);
  const ConvPoint *below = &points[above - 1], *over = &points[above];
  const ConvPoint* near = batch - below->batch <= over->batch - batch ? below : over;
  if (below->workspace_bytes && over->workspace_bytes) return on_line(below, over, near, batch);
  /* An engine without workspace on one side: the nearer one's, in proportion. */
  return near->workspace_bytes * batch / near->batch;
}

/* How many times the larger of two sizes is the smaller. */
static double ratio(int64_t a, int64_t b) {
  double x = (double)(a > 0 ? a : 1), y = (double)(b > 0 ? b : 1);
  return x > y ? x / y : y / x;
}

#define UNALIKE 1e300 /* another operation, data type or grouping: never taken */

/* How unlike two convolutions are, as a product of ratios (channels in and out, image size):
   1 for the same sizes. A kernel or stride of another size counts as more than any
   difference of sizes. */
static double unlikeness(const int64_t* a, const int64_t* b) {
  if (a[SHAPE_OPERATION] != b[SHAPE_OPERATION] || a[SHAPE_DATA_TYPE] != b[SHAPE_DATA_TYPE] ||
      a[SHAPE_GROUPED] != b[SHAPE_GROUPED])
    return UNALIKE;
  double u = ratio(a[SHAPE_IN_CHANNELS], b[SHAPE_IN_CHANNELS]) *
             ratio(a[SHAPE_OUT_CHANNELS], b[SHAPE_OUT_CHANNELS]) *
             ratio(a[SHAPE_IN_ELEMENTS], b[SHAPE_IN_ELEMENTS]);
  if (a[SHAPE_KERNEL] != b[SHAPE_KERNEL]) u *= 1e40;
  if (a[SHAPE_STRIDE] != b[SHAPE_STRIDE]) u *= 1e20;
  return u;
}

/* The bytes per sample a convolution's workspace is taken in proportion to: its input's and
   output's elements. */
static double sample_elements(const int64_t* shape) {
  return (double)shape[SHAPE_IN_CHANNELS] * (double)shape[SHAPE_IN_ELEMENTS] +
         (double)shape[SHAPE_OUT_CHANNELS] * (double)shape[SHAPE_OUT_ELEMENTS];
}

#define ALIKE 3 /* the most alike convolutions an estimate is the median of */

/* For a convolution the table lacks: the median of the ALIKE most alike ones' workspaces at
   this batch size, each in proportion to the two convolutions' tensors (0 when none is alike:
   another operation or data type). The median, because the most alike one alone may run an
   engine of its own (an FFT's workspace is ten times a GEMM's): left out of the table one
   shape at a time, 1,500 of its convolutions were estimated within 10% in 77% of cases by the
   median of three, 71% by the most alike one (docs/record.md). */
static int64_t alike_workspace(const Attribute* shape_attribute, int64_t batch) {
  if (!shape_attribute || shape_attribute->count != SHAPE_FIELDS) return 0;
  int64_t shape[SHAPE_FIELDS];
  memcpy(shape, shape_attribute->bytes, sizeof shape);
  const ConvKey* best[ALIKE] = {NULL};
  double best_unlikeness[ALIKE] = {UNALIKE, UNALIKE, UNALIKE};
  for (size_t i = 0; i < g_conv_key_count; i++) {
    double u = unlikeness(shape, g_conv_keys[i].shape);
    /* insert into the sorted few, keeping the table's order among equals */
    for (int place = 0; place < ALIKE; place++) {
      if (u >= best_unlikeness[place]) continue;
      for (int later = ALIKE - 1; later > place; later--)
        best[later] = best[later - 1], best_unlikeness[later] = best_unlikeness[later - 1];
      best[place] = &g_conv_keys[i], best_unlikeness[place] = u;
      break;
    }
  }
  double estimates[ALIKE];
  int found = 0;
  for (; found < ALIKE && best[found]; found++) {
    int answer;
    double bytes = (double)measured_workspace(best[found], batch, &answer);
    estimates[found] = bytes * sample_elements(shape) / sample_elements(best[found]->shape);
  }
  if (found == 0) return 0;
  /* sort the few, then the middle one (the mean of the two middle ones for an even count) */
  for (int i = 1; i < found; i++)
    for (int j = i; j > 0 && estimates[j] < estimates[j - 1]; j--) {
      double swap = estimates[j];
      estimates[j] = estimates[j - 1], estimates[j - 1] = swap;
    }
  double median = found % 2 ? estimates[found / 2]
                            : (estimates[found / 2 - 1] + estimates[found / 2]) / 2;
  return (int64_t)median;
}

/* The workspace of a graph whose first operation is a convolution, and how it was answered;
   -1 for another graph. */
static int64_t convolution_workspace_bytes(const Descriptor* graph, int* answer) {
  const Attribute* ops = find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
  if (!ops || ops->count < 1) return -1;
  const Descriptor* op;
  memcpy(&op, ops->bytes, sizeof op);
  if (!op || convolution_operation(op) < 0) return -1;
  const Attribute* key = find(op, HIPMEM_ATTR_CONVOLUTION_KEY);
  const ConvKey* entry =
      key ? bsearch(key->bytes, g_conv_keys, g_conv_key_count, sizeof *g_conv_keys, compare_key)
          : NULL;
  int64_t batch = int64_of(op, HIPMEM_ATTR_CONVOLUTION_BATCH, 0);
  *answer = NOT_MEASURED;
  if (!entry) return alike_workspace(find(op, HIPMEM_ATTR_CONVOLUTION_SHAPE), batch);
  return measured_workspace(entry, batch, answer);
}

/* PyTorch asks cuDNN's heuristic while the graph lives, and builds plans after it is gone:
   the engine a heuristic finds keeps a convolution's workspace and answer for its plans. */
static void keep_convolution_workspace(Descriptor* engine, const Descriptor* graph) {
  int answer;
  int64_t bytes = graph ? convolution_workspace_bytes(graph, &answer) : -1;
  if (bytes < 0) return;
  set_int64(engine, HIPMEM_ATTR_CONVOLUTION_WORKSPACE, bytes);
  set_int64(engine, HIPMEM_ATTR_CONVOLUTION_ANSWER, answer);
}

/* A plan's convolution workspace, counted by how it was answered; -1 for another plan. */
static int64_t plan_convolution_workspace(const Descriptor* engine) {
  if (!engine || !find(engine, HIPMEM_ATTR_CONVOLUTION_WORKSPACE)) return -1;
  int64_t answer = int64_of(engine, HIPMEM_ATTR_CONVOLUTION_ANSWER, 0);
  if (answer >= 0 && answer < ANSWERS) g_convolutions[answer]++;
  return int64_of(engine, HIPMEM_ATTR_CONVOLUTION_WORKSPACE, 0);
}

/* The boot reads the counts once the script is done: measured, from other batch sizes, not in
   the table. */
EXPORT void hipmem_record_cudnn_convolutions(int64_t counts[3]) {
  memcpy(counts, g_convolutions, sizeof g_convolutions);
}
