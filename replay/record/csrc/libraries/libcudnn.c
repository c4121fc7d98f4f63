/* cuDNN as a recording needs it: a version, handles, error texts, and the backend API that
   PyTorch's cuDNN attention (aten/src/ATen/native/cudnn/MHA.cpp) and convolutions (Conv_v8.cpp)
   drive through cudnn-frontend. A convolution's workspace is cudnn_convolution.c's.

   Attention runs PyTorch's
   own cuDNN path, so every tensor it allocates (output, softmax statistics, dropout seed and
   offset, each workspace, gradients copied to matching layouts) is the GPU's request. What
   only cuDNN could answer is the workspace of an execution plan; cudnn-frontend adds its own
   part (dQ accumulated in fp32 and the softmax sums, for the backward) on top of it. The
   backend part is what the H200 answered under cuDNN 9.19 for every attention measured
   (benchmarks/gpu_cudnn_attention.py; plan_workspace_bytes below).

   The backend is played as a store: a descriptor keeps the attributes set on it and gives
   them back; the answers cuDNN computes (a heuristic's engine configurations, a plan's
   workspace) are made here. Nothing is executed. */

#define CUDNN_TYPE_BOOLEAN 2
#define CUDNN_TYPE_INT64 3
#define CUDNN_TYPE_DOUBLE 5
#define CUDNN_TYPE_HANDLE 0
#define CUDNN_TYPE_VOID_PTR 6
#define CUDNN_TYPE_BACKEND_DESCRIPTOR 15
#define CUDNN_TYPE_INT32 23
#define CUDNN_TYPE_CHAR 24
#define CUDNN_TYPE_FRACTION 26

#define CUDNN_BACKEND_ENGINE_DESCRIPTOR 2
#define CUDNN_BACKEND_ENGINECFG_DESCRIPTOR 3
#define CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR 5
#define CUDNN_BACKEND_TENSOR_DESCRIPTOR 17
#define CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR 19

#define CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH 201
#define CUDNN_ATTR_ENGINEHEUR_RESULTS 202
#define CUDNN_ATTR_ENGINECFG_ENGINE 300
#define CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE 303
#define CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED 304
#define CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG 401
#define CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE 402
#define CUDNN_ATTR_OPERATIONGRAPH_OPS 801
#define CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT 802
#define CUDNN_ATTR_TENSOR_DATA_TYPE 901
#define CUDNN_ATTR_TENSOR_DIMENSIONS 902
#define CUDNN_ATTR_TENSOR_IS_VIRTUAL 907
#define CUDNN_ATTR_ENGINE_OPERATION_GRAPH 1300
#define CUDNN_ATTR_ENGINE_GLOBAL_INDEX 1301

#define CUDNN_STATUS_BAD_PARAM 2000
#define CUDNN_STATUS_BAD_PARAM_NULL_POINTER 2002

/* The workspace most attention plans ask beyond cudnn-frontend's own part (measured). */
#define PLAN_WORKSPACE_BYTES 256
#define CUDNN_DATA_FLOAT 0
#define MAX_GRAPH_TENSORS 64

#include "record_cudnn.h" /* g_cudnn_version: the cuDNN this PyTorch build requires */

/* cuDNN 9's version number: 9.19.0 is 91900. */
EXPORT size_t cudnnGetVersion(void) {
  return (size_t)(g_cudnn_version[0] * 10000 + g_cudnn_version[1] * 100 + g_cudnn_version[2]);
}

EXPORT size_t cudnnGetCudartVersion(void) { return 13000; }

/* libraryPropertyType: 0 major, 1 minor, 2 patch (torch.backends.cudnn.version() reads them). */
EXPORT int cudnnGetProperty(int type, int* value) {
  if (!value || type < 0 || type > 2) return CUDNN_STATUS_BAD_PARAM;
  *value = g_cudnn_version[type];
  return 0;
}

EXPORT int cudnnCreate(void** handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = stub_object();
  return 0;
}

EXPORT void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message && max_size) message[0] = '\0';
}

typedef struct Attribute {
  int name;
  int type;
  int64_t count;
  unsigned char* bytes;
  struct Attribute* next;
} Attribute;

typedef struct {
  int type;
  Attribute* attributes;
} Descriptor;

static size_t element_bytes(int type) {
  switch (type) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return 8;
    case CUDNN_TYPE_BOOLEAN:
    case CUDNN_TYPE_CHAR:
      return 1;
    case CUDNN_TYPE_FRACTION:
      return 16;
    default: /* every other attribute type is an enum or an int32 */
      return 4;
  }
}

static Attribute* find(const Descriptor* descriptor, int name) {
  for (Attribute* a = descriptor->attributes; a; a = a->next)
    if (a->name == name) return a;
  return NULL;
}

static void set(Descriptor* descriptor, int name, int type, int64_t count, const void* values) {
  Attribute* a = find(descriptor, name);
  if (!a) {
    a = calloc(1, sizeof *a);
    a->name = name;
    a->next = descriptor->attributes;
    descriptor->attributes = a;
  }
  size_t nbytes = element_bytes(type) * (size_t)(count > 0 ? count : 0);
  free(a->bytes);
  a->bytes = malloc(nbytes ? nbytes : 1);
  if (nbytes) memcpy(a->bytes, values, nbytes);
  a->type = type;
  a->count = count;
}

static void set_int64(Descriptor* descriptor, int name, int64_t value) {
  set(descriptor, name, CUDNN_TYPE_INT64, 1, &value);
}

static void set_descriptor(Descriptor* descriptor, int name, const Descriptor* value) {
  set(descriptor, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

static void clear(Descriptor* descriptor) {
  for (Attribute *a = descriptor->attributes, *next; a; a = next) {
    next = a->next;
    free(a->bytes);
    free(a);
  }
  descriptor->attributes = NULL;
}

/* A descriptor given back by value: the caller made `into` and reads it as its own. The
   descriptors it refers to are shared, as cuDNN shares them. */
static void copy_into(Descriptor* into, const Descriptor* from) {
  clear(into);
  into->type = from->type;
  for (const Attribute* a = from->attributes; a; a = a->next)
    set(into, a->name, a->type, a->count, a->bytes);
}

static const Descriptor* descriptor_at(const Descriptor* descriptor, int name) {
  const Attribute* a = find(descriptor, name);
  if (!a || a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || a->count < 1) return NULL;
  const Descriptor* value;
  memcpy(&value, a->bytes, sizeof value);
  return value;
}

EXPORT int cudnnBackendCreateDescriptor(int type, void** made) {
  if (!made) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Descriptor* descriptor = calloc(1, sizeof *descriptor);
  descriptor->type = type;
  *made = descriptor;
  return 0;
}

EXPORT int cudnnBackendDestroyDescriptor(void* descriptor) {
  if (descriptor) {
    clear(descriptor);
    free(descriptor);
  }
  return 0;
}

EXPORT int cudnnBackendInitialize(void* descriptor) {
  (void)descriptor;
  return 0;
}

EXPORT int cudnnBackendSetAttribute(void* descriptor, int name, int type, int64_t count,
                                    const void* values) {
  if (!descriptor || (count > 0 && !values)) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (count < 0) return CUDNN_STATUS_BAD_PARAM;
  set(descriptor, name, type, count, values);
  return 0;
}

/* The attributes of attention's operations that are tensors (pointwise X, B, Y, dX, dY, T;
   matmul A, B, C; reduction X, Y; reshape X, Y; the fused attention forward of cuDNN 9's
   newer releases, which cudnn-frontend builds for some inference: Q, K, V, O, statistics,
   scale). An operation's other descriptors (a pointwise or matmul descriptor) may be destroyed
   once the operation is made: never followed. */
static const int TENSOR_ATTRIBUTES[] = {751,  752,  753,  756,  757,  758,  1520, 1521, 1522, 1610,
                                        1611, 2200, 2201, 2800, 2801, 2802, 2803, 2804, 2805};

static int is_tensor_attribute(int name) {
  for (size_t i = 0; i < sizeof TENSOR_ATTRIBUTES / sizeof *TENSOR_ATTRIBUTES; i++)
    if (TENSOR_ATTRIBUTES[i] == name) return 1;
  return 0;
}

/* The tensors of a graph that live in memory (not virtual: the graph's inputs and outputs),
   from every operation's tensor attributes. */
static int graph_tensors(const Descriptor* graph, const Descriptor** tensors) {
  int found = 0;
  const Attribute* ops = find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
  for (int64_t i = 0; ops && i < ops->count; i++) {
    const Descriptor* op;
    memcpy(&op, ops->bytes + i * (int64_t)sizeof op, sizeof op);
    for (const Attribute* a = op->attributes; a; a = a->next) {
      if (a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || !is_tensor_attribute(a->name)) continue;
      for (int64_t j = 0; j < a->count; j++) {
        const Descriptor* tensor;
        memcpy(&tensor, a->bytes + j * (int64_t)sizeof tensor, sizeof tensor);
        if (!tensor || tensor->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) continue;
        const Attribute* is_virtual = find(tensor, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
        if (is_virtual && is_virtual->bytes[0]) continue;
        int seen = 0;
        for (int k = 0; k < found; k++) seen |= tensors[k] == tensor;
        if (!seen && found < MAX_GRAPH_TENSORS) tensors[found++] = tensor;
      }
    }
  }
  return found;
}

/* A tensor of attention's [batch, heads, sequence, head dim], per element (not the softmax
   statistics' [.., 1] nor a scale's [1, 1, 1, 1]): 1 and its dimensions and bytes, or 0. */
static int attention_tensor(const Descriptor* tensor, int64_t d[4], int64_t* nbytes) {
  const Attribute* dims = find(tensor, CUDNN_ATTR_TENSOR_DIMENSIONS);
  const Attribute* type = find(tensor, CUDNN_ATTR_TENSOR_DATA_TYPE);
  if (!dims || dims->count != 4) return 0;
  memcpy(d, dims->bytes, 4 * sizeof *d);
  if (d[3] < 2) return 0;
  int32_t data_type = CUDNN_DATA_FLOAT;
  if (type) memcpy(&data_type, type->bytes, sizeof data_type);
  *nbytes = d[0] * d[1] * d[2] * d[3] * (data_type == CUDNN_DATA_FLOAT ? 4 : 2);
  return 1;
}

static int matrix_products(const Descriptor* graph) {
  int found = 0;
  const Attribute* ops = find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
  for (int64_t i = 0; ops && i < ops->count; i++) {
    const Descriptor* op;
    memcpy(&op, ops->bytes + i * (int64_t)sizeof op, sizeof op);
    found += op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
  }
  return found;
}

/* The workspace of an attention plan, beyond cudnn-frontend's own part, as cuDNN 9.19 answered
   on the H200 for the 53 attentions of benchmarks/gpu_cudnn_attention.py: PLAN_WORKSPACE_BYTES,
   except
   - a forward whose queries are one token long (generation's decode step): none, whether
     cudnn-frontend builds it of matrix products or as one fused operation;
   - a grouped-query backward (fewer key and value heads than query heads) keeps dK and dV at
     the query's heads: (query heads / key heads) x (the bytes of dK and dV) more.
   A backward's graph has four matrix products or more (dV, dP, dQ, dK); a forward's, two. Its
   key-head tensors are K, V, dK and dV. */
static int64_t plan_workspace_bytes(const Descriptor* graph) {
  int products = matrix_products(graph); /* none: the fused forward */
  const Descriptor* tensors[MAX_GRAPH_TENSORS];
  int count = graph_tensors(graph, tensors);
  int64_t heads[MAX_GRAPH_TENSORS] = {0}, bytes[MAX_GRAPH_TENSORS] = {0};
  int64_t most = 0, fewest = 0;
  int one_token = 0;
  for (int i = 0; i < count; i++) {
    int64_t d[4];
    if (!attention_tensor(tensors[i], d, &bytes[i])) continue;
    heads[i] = d[1];
    one_token |= d[2] == 1;
    if (d[1] > most) most = d[1];
    if (!fewest || d[1] < fewest) fewest = d[1];
  }
  if (products < 4) return one_token ? 0 : PLAN_WORKSPACE_BYTES;
  int64_t key_bytes = 0;
  int key_tensors = 0;
  for (int i = 0; i < count; i++)
    if (heads[i] && heads[i] == fewest) key_bytes += bytes[i], key_tensors++;
  if (fewest == most || key_tensors != 4) return PLAN_WORKSPACE_BYTES;
  return PLAN_WORKSPACE_BYTES + most / fewest * (key_bytes / 2);
}

#include "cudnn_convolution.c"

static const Descriptor* plan_engine(const Descriptor* plan) {
  const Descriptor* config = descriptor_at(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
  return config ? descriptor_at(config, CUDNN_ATTR_ENGINECFG_ENGINE) : NULL;
}

/* A plan's workspace: a convolution's from the GPU's table, an attention's as measured. */
static int64_t plan_workspace(const Descriptor* plan) {
  const Descriptor* engine = plan_engine(plan);
  int64_t convolution = plan_convolution_workspace(engine);
  if (convolution >= 0) return convolution;
  const Descriptor* graph = engine ? descriptor_at(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH) : NULL;
  return graph ? plan_workspace_bytes(graph) : PLAN_WORKSPACE_BYTES;
}

/* A plan's workspace is fixed when it is finalized: the graph it refers to may be gone by the
   time the plan is asked. */
EXPORT int cudnnBackendFinalize(void* made) {
  Descriptor* descriptor = made;
  if (!descriptor) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  keep_convolution_key(descriptor);
  if (descriptor->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)
    set_int64(descriptor, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, plan_workspace(descriptor));
  return 0;
}

/* The one engine configuration a heuristic finds: an engine of the heuristic's graph. */
static void engine_config(Descriptor* config, const Descriptor* heuristic) {
  Descriptor* engine = calloc(1, sizeof *engine); /* shared by every copy: never freed */
  engine->type = CUDNN_BACKEND_ENGINE_DESCRIPTOR;
  const Descriptor* graph = descriptor_at(heuristic, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
  set_descriptor(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph);
  set_int64(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, 0);
  keep_convolution_workspace(engine, graph);
  clear(config);
  config->type = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
  set_descriptor(config, CUDNN_ATTR_ENGINECFG_ENGINE, engine);
  set_int64(config, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, PLAN_WORKSPACE_BYTES);
  int32_t shared_memory_bytes = 0; /* within any limit a caller sets */
  set(config, CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1, &shared_memory_bytes);
}

/* HIPMEM_VCUDA_TRACE=1 names each attribute asked that nobody set. */
static void stub_called_attribute(int name) {
  const char* trace = getenv("HIPMEM_VCUDA_TRACE");
  if (trace && *trace == '1') fprintf(stderr, "vcuda stub: cuDNN attribute %d, never set\n", name);
}

static int give_count(int64_t* count, int64_t value) {
  if (count) *count = value;
  return 0;
}

EXPORT int cudnnBackendGetAttribute(void* const from, int name, int type, int64_t requested,
                                    int64_t* count, void* values) {
  const Descriptor* descriptor = from;
  if (!descriptor) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    if (values && requested > 0) engine_config(((Descriptor**)values)[0], descriptor);
    return give_count(count, 1);
  }
  const Attribute* a = find(descriptor, name);
  if (!a) {
    if (name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT && values && requested > 0) {
      int64_t engines = 1;
      memcpy(values, &engines, sizeof engines);
      return give_count(count, 1);
    }
    stub_called_attribute(name);
    return give_count(count, 0); /* a list cuDNN would leave empty: knobs, notes */
  }
  int64_t given = a->count < requested ? a->count : requested;
  if (values && given > 0) {
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
      for (int64_t i = 0; i < given; i++) {
        Descriptor* stored;
        memcpy(&stored, a->bytes + i * (int64_t)sizeof stored, sizeof stored);
        copy_into(((Descriptor**)values)[i], stored);
      }
    } else {
      memcpy(values, a->bytes, element_bytes(a->type) * (size_t)given);
    }
  }
  return give_count(count, a->count);
}

EXPORT int cudnnBackendExecute(void* handle, void* plan, void* variant_pack) {
  (void)handle, (void)plan, (void)variant_pack;
  return 0;
}
