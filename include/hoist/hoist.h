/* hoist: load model weights (GGUF, safetensors, sharded sets) into GPU or host memory.
 *
 * The C API is the stable interface for engines. Every call that can fail returns a
 * hoist_status; hoist_last_error() then gives the message (file, byte offset, tensor,
 * device, stage) for the calling thread, valid until that thread's next failing call and cut
 * to 4095 bytes at most. No exception crosses this API.
 *
 * Options out of their bounds (below) are refused with HOIST_INVALID_ARGUMENT before anything
 * is opened. A model file replaced or written to after hoist_model_open is reported as
 * HOIST_FILE_CHANGED by the load or the verify that meets it, never loaded silently.
 *
 * Thread safety: a hoist_model may be read from several threads; one load runs per call.
 * Ownership: what hoist_*_open / hoist_load* return is freed with the matching close/free;
 * strings and arrays returned by hoist stay valid until the object they came from is freed.
 */
#ifndef HOIST_HOIST_H_
#define HOIST_HOIST_H_

#include <stddef.h>
#include <stdint.h>

/* Entries kept for one release beside the plan entries that replace them; a caller's compiler
 * warns where they are called unless HOIST_NO_DEPRECATED_WARNINGS is defined. */
#if defined(HOIST_NO_DEPRECATED_WARNINGS)
#define HOIST_DEPRECATED(replacement)
#elif defined(__GNUC__) || defined(__clang__)
#define HOIST_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#elif defined(_MSC_VER)
#define HOIST_DEPRECATED(replacement) __declspec(deprecated("use " replacement))
#else
#define HOIST_DEPRECATED(replacement)
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hoist_status {
  HOIST_OK = 0,
  HOIST_ERROR = 1,           /* anything not listed below */
  HOIST_INVALID_MODEL = 2,   /* the model's bytes break a rule of its format */
  HOIST_STALLED = 3,         /* the watchdog found a stage with no progress */
  HOIST_DEVICE_ERROR = 4,    /* the device reported an error or ran out of memory */
  HOIST_VERIFY_MISMATCH = 5, /* bytes on the device differ from the file's */
  HOIST_CANCELLED = 6,       /* the progress callback or a signal cancelled the load */
  HOIST_IO_ERROR = 7,
  HOIST_NOT_FOUND = 8,
  HOIST_INVALID_ARGUMENT = 9,
  HOIST_UNAVAILABLE = 10, /* the device or backend is not present here */
  HOIST_FILE_CHANGED = 11 /* a model file was replaced or written to after it was opened */
} hoist_status;

typedef struct hoist_model hoist_model;   /* an opened model: its tensor directory */
typedef struct hoist_loaded hoist_loaded; /* a model's tensors on a device */

typedef struct hoist_tensor_info {
  const char* name;
  const char* dtype;     /* the format's spelling: "F32", "BF16", "Q4_K" */
  const uint64_t* shape; /* outermost dimension first */
  uint32_t ndim;
  uint32_t file;   /* index of the file that holds it */
  uint64_t offset; /* absolute byte offset in that file */
  uint64_t nbytes;
} hoist_tensor_info;

/* Called from the loading thread about every 100 ms; return nonzero to cancel. */
typedef int (*hoist_progress_fn)(void* user, uint64_t done_bytes, uint64_t total_bytes);
/* Returns the device pointer where tensor `index` goes (room for tensor->nbytes bytes), or
 * NULL to fail the load. */
typedef void* (*hoist_destination_fn)(void* user, size_t index, const hoist_tensor_info* tensor);
/* Called on a reader thread once every byte of tensor `index` is on its device (for zero-byte
 * tensors, on the loading thread as streaming starts). Keep it short: the reader waits. */
typedef void (*hoist_tensor_loaded_fn)(void* user, size_t index);

typedef struct hoist_load_options {
  uint32_t struct_size; /* set by hoist_load_options_init */
  const char*
      device;  /* "auto" (default), "host", "sim[:k=v,...]", "gpu:N" (or "cuda:N", "hip:N") */
  int threads; /* reader threads, 0 to 1024; 0: chosen from the machine */
  uint64_t chunk_bytes;     /* 4 KiB to 1 GiB; 0: default (4 MiB) */
  uint64_t staging_bytes;   /* staging budget, at most half the machine's memory; 0: two
                               chunks per reader */
  double stall_timeout_s;   /* seconds, above 0 and at most 1e7; 0: default (60 s) */
  int checksum;             /* nonzero: XXH3-64 of every tensor */
  int direct_io;            /* nonzero: bypass the page cache */
  const char* const* names; /* tensors to load (none NULL); NULL: all */
  size_t name_count;
  hoist_progress_fn progress;
  void* progress_user;
  /* Added after the first group: a struct_size that ends above (an engine built against an
   * older header) is accepted with these unset. */
  hoist_tensor_loaded_fn tensor_loaded; /* NULL: none */
  void* tensor_loaded_user;
  /* hoist_load_into only. Nonzero: the destination callback is called on a reader thread just
   * before a tensor's first bytes are copied (about in file order), not for every tensor before
   * the load: once per tensor, for several tensors at once from different threads. It may block
   * until the caller has room. Before each call every copy the
   * asking reader started has landed and been reported to tensor_loaded, so a caller that hands
   * out destinations in file order and waits only for reported tensors to be consumed cannot
   * deadlock the load; time spent in it is not a stall. It must return soon after the load is
   * cancelled (NULL fails the load). Never called for zero-byte tensors. */
  int destinations_when_needed;
  /* Several devices: `device` names them joined by commas ("cuda:0,cuda:1"). Each tensor goes
   * to the device placement[i] names (an index into that list; placement_count must be the
   * model's tensor count), or, without a placement, consecutive layers go to each device in
   * proportion to split_shares (one positive share per device) or to its free memory; a device
   * that would get more than it has free is refused (HOIST_DEVICE_ERROR) before anything is
   * read. hoist_model_place says where each tensor would go. */
  const uint32_t* placement;
  size_t placement_count;
  const double* split_shares;
  size_t split_share_count;
  /* Second group added: a struct_size that ends above is accepted with these unset.
   * How several devices share the model: "layer" (NULL, the default), or "tensor" or
   * "replicate", which load the parts hoist_model_split gives (hoist_loaded_tensor(loaded, i)
   * is then part i, in hoist_model_split's order). */
  const char* split;
  /* With split "tensor" (hoist_load, hoist_model_split, hoist_model_cut_ex, hoist_load_rank):
   * a JSON plan file of name pattern: cut ("*.q_proj.weight": "rows", "columns", "replicate"
   * or a device index), tried in order before the built-in rules. NULL: the built-in rules. */
  const char* split_plan;
  /* Third group added: a struct_size that ends above is accepted with these unset.
   * hoist_load_into with destinations_when_needed only: asked first, before the reader settles
   * its copies in flight (which drains its queue to the device), for a destination the caller
   * has without waiting; it must not block, and returns NULL when the caller has none yet (the
   * reader then settles and calls the destination callback, which may wait). Each tensor is
   * asked here at most once. NULL: every destination is asked for after settling. */
  hoist_destination_fn destination_at_once;
  void* destination_at_once_user;
} hoist_load_options;

void hoist_load_options_init(hoist_load_options* options);

hoist_status hoist_model_open(const char* path, hoist_model** out);

/* Where hoist_model_open_ex finds a model. */
typedef enum hoist_source_kind {
  HOIST_SOURCE_PATH = 0,  /* path: a file, index, directory of shards or first GGUF split */
  HOIST_SOURCE_MEMORY = 1 /* bytes, size: one safetensors or GGUF file in the caller's memory,
                             which must stay unchanged and allocated until hoist_model_close;
                             path (optional) names it in messages */
} hoist_source_kind;

typedef struct hoist_model_source {
  uint32_t struct_size; /* set by hoist_model_source_init */
  hoist_source_kind kind;
  const char* path;
  const void* bytes;
  uint64_t size;
} hoist_model_source;

void hoist_model_source_init(hoist_model_source* source);
/* hoist_model_open for any source. A model in memory loads and verifies as a file would
 * (without direct I/O, which it has no use for). */
hoist_status hoist_model_open_ex(const hoist_model_source* source, hoist_model** out);
void hoist_model_close(hoist_model* model);
const char* hoist_model_format(const hoist_model* model); /* "gguf", "safetensors" */
const char* hoist_model_metadata_json(
    const hoist_model* model); /* {"key": {"type","count","value"}} */
size_t hoist_model_tensor_count(const hoist_model* model);
hoist_status hoist_model_tensor(const hoist_model* model, size_t index, hoist_tensor_info* out);
hoist_status hoist_model_find(const hoist_model* model, const char* name, size_t* index);
/* Tensor `index`'s dtype as blocks: `elements` values in `bytes` bytes (F32: 1 in 4, Q4_K: 256
 * in 144, F4: 2 in 1). A quantized GGUF tensor is rows of whole blocks; split or view it in
 * them. HOIST_INVALID_ARGUMENT for a dtype hoist has no geometry for. */
hoist_status hoist_model_tensor_block(const hoist_model* model, size_t index, uint32_t* elements,
                                      uint32_t* bytes);
/* Whether `split` (a name hoist_load_options.split takes: "layer", "tensor", "replicate" or a
 * policy a host program registered) places parts of tensors, which hoist_model_split lists,
 * rather than whole tensors, which hoist_model_place lists. HOIST_INVALID_ARGUMENT, naming
 * the choices, for a name that is no split. */
hoist_status hoist_split_places_parts(const char* split, int* places_parts);
/* 1 when hoist reads the model `name` names from elsewhere than the local file system (an
 * http(s):// URL, s3://, gs:// or hf://), else 0 (NULL included). */
int hoist_name_is_remote(const char* name);
/* Deprecated: hoist_model_plan. Where a load with these options would put each tensor:
 * device_of[i] is an index into the options' device list (count: the model's tensor count).
 * Opens the devices to read their free memory; allocates nothing. */
HOIST_DEPRECATED("hoist_model_plan")
hoist_status hoist_model_place(hoist_model* model, const hoist_load_options* options,
                               uint32_t* device_of, size_t count);

/* Loads into device memory that hoist allocates (one block) and frees in hoist_loaded_free.
 * The model must outlive the result. */
hoist_status hoist_load(hoist_model* model, const hoist_load_options* options, hoist_loaded** out);
/* Loads into destinations the caller owns (an engine's own buffers); hoist_loaded_free then
 * frees only hoist's bookkeeping. */
hoist_status hoist_load_into(hoist_model* model, const hoist_load_options* options,
                             hoist_destination_fn destination, void* user, hoist_loaded** out);
/* Part of a tensor: the tensor seen as rows of row_bytes bytes (which must divide its nbytes),
 * rows [row_begin, row_end) and bytes [column_begin, column_end) of each. */
typedef struct hoist_region {
  size_t tensor; /* index in the model */
  uint64_t row_bytes;
  uint64_t row_begin, row_end;
  uint64_t column_begin, column_end;
  void* destination; /* the caller's memory on the load's device, the region's rows packed:
                        (row_end - row_begin) * (column_end - column_begin) bytes */
} hoist_region;

/* Deprecated: hoist_plan_from_parts and hoist_load_plan. Loads regions (slices) of tensors into
 * the caller's memory: a row range is read as one file range; a column range reads its rows'
 * file range once into pinned staging and copies only the columns to the device.
 * hoist_loaded_tensor(loaded, i) is region i's destination. The options' names, checksum and
 * destinations_when_needed must be unset; hoist_loaded_verify refuses the result (the caller
 * compares what it asked for). */
HOIST_DEPRECATED("hoist_plan_from_parts and hoist_load_plan")
hoist_status hoist_load_regions(hoist_model* model, const hoist_load_options* options,
                                const hoist_region* regions, size_t count, hoist_loaded** out);
/* A part of a tensor bound for one device, as hoist_region is, with its device. */
typedef struct hoist_part {
  size_t tensor; /* index in the model */
  uint64_t row_bytes;
  uint64_t row_begin, row_end;
  uint64_t column_begin, column_end;
  uint32_t device;   /* index into the options' device list */
  void* destination; /* the caller's memory on that device, the part's rows packed; NULL:
                        hoist allocates (every part has a destination or none has) */
} hoist_part;

/* Deprecated: hoist_model_plan. How `split` places the model on the options' devices, parts
 * even on one device: "tensor" cuts each weight among them (tensor parallel: attention q/k/v, MLP
 * gate/up, embeddings and the output head by rows; attention output and MLP down by columns; the
 * rest whole on every device) in proportion to split_shares (default equal); "replicate" puts every
 * tensor on every device. Writes up to `capacity` parts and sets *count to how many there are
 * (capacity 0 asks the count). Opens the devices to read their free memory: HOIST_DEVICE_ERROR when
 * one would not hold its parts. */
HOIST_DEPRECATED("hoist_model_plan")
hoist_status hoist_model_split(hoist_model* model, const hoist_load_options* options,
                               const char* split, hoist_part* parts, size_t capacity,
                               size_t* count);
/* Deprecated: hoist_model_plan_cut. The parts `split` gives `devices` devices (device: 0 to
 * devices - 1), as hoist_model_split does, without opening a device or checking memory: what one
 * rank of a job that runs a process per device takes its share from (the parts with device == its
 * rank). */
HOIST_DEPRECATED("hoist_model_plan_cut")
hoist_status hoist_model_cut(const hoist_model* model, const char* split, uint32_t devices,
                             const double* shares, size_t share_count, hoist_part* parts,
                             size_t capacity, size_t* count);
/* Deprecated: hoist_model_plan_cut. hoist_model_cut with the options' split_shares and
 * split_plan (the rest of the options is not used). */
HOIST_DEPRECATED("hoist_model_plan_cut")
hoist_status hoist_model_cut_ex(const hoist_model* model, const hoist_load_options* options,
                                const char* split, uint32_t devices, hoist_part* parts,
                                size_t capacity, size_t* count);
/* Deprecated: hoist_plan_from_parts and hoist_load_plan. Loads parts onto the options' devices
 * in one load: parts that cover the same rows of a tensor (its columns cut among devices, or
 * the whole tensor on each) are read once for all of them,
 * and whole tensors on several GPUs that reach each other go 1/N over each host link and on
 * over NVLink/P2P. hoist_loaded_tensor(loaded, i) is part i, hoist_loaded_tensor_device its
 * device; hoist_loaded_verify compares every part with the file. The options' names,
 * placement, checksum and destinations_when_needed must be unset. */
HOIST_DEPRECATED("hoist_plan_from_parts and hoist_load_plan")
hoist_status hoist_load_parts(hoist_model* model, const hoist_load_options* options,
                              const hoist_part* parts, size_t count, hoist_loaded** out);
/* A load's plan: where each byte of the model goes, as parts (hoist_part). The one way to see a
 * load before it runs, to change where it lands and to run it:
 *   hoist_model_plan -> hoist_plan_part / hoist_plan_set_destination -> hoist_load_plan.
 * A load of whole tensors (one device, split "layer", a placement) has one part per tensor of
 * the model, in its order, each whole (row_bytes its nbytes, rows [0, 1), bytes [0, nbytes));
 * a split that places parts ("tensor", "replicate", a registered one) on several devices has
 * its parts. Either way hoist_loaded_tensor(loaded, i) of the load is part i. A plan is not
 * thread-safe; the model must outlive it. */
typedef struct hoist_plan hoist_plan;
/* What hoist_load with these options would do: opens the options' devices to check that each
 * holds its parts (HOIST_DEVICE_ERROR with the numbers otherwise); allocates no device memory.
 * The options' split, split_shares, split_plan and placement make the plan. */
hoist_status hoist_model_plan(hoist_model* model, const hoist_load_options* options,
                              hoist_plan** out);
/* The parts the options' split (one that places parts) gives `devices` devices, without
 * opening a device or checking memory: what each rank of a job of `devices` processes takes its
 * share from (the parts whose device is its rank; hoist_load_rank loads them). Such a plan is
 * read, not loaded: hoist_load_plan refuses it. */
hoist_status hoist_model_plan_cut(const hoist_model* model, const hoist_load_options* options,
                                  uint32_t devices, hoist_plan** out);
/* A plan of parts the caller chose (its own cut of the model), for the devices of the options
 * it is loaded with: each part's device indexes them. Checked when loaded. */
hoist_status hoist_plan_from_parts(const hoist_model* model, const hoist_part* parts, size_t count,
                                   hoist_plan** out);
size_t hoist_plan_part_count(const hoist_plan* plan);
/* Part `index`: its tensor, rows, bytes of each row, device and destination (NULL: none set). */
hoist_status hoist_plan_part(const hoist_plan* plan, size_t index, hoist_part* out);
/* Part `index` loads into `destination`, the caller's memory on its device holding the part's
 * rows packed; NULL unsets it. A plan is loaded with a destination for every part or for none
 * (then hoist allocates one block per device, freed in hoist_loaded_free). */
hoist_status hoist_plan_set_destination(hoist_plan* plan, size_t index, void* destination);
/* Loads the plan. The options give the devices (the ones the plan was made for: the same
 * device string) and the settings; their split, split_shares, split_plan and placement are not
 * read. The options' names load only those tensors of a plan of whole tensors (the others'
 * hoist_loaded_tensor is NULL); a plan of parts takes no names and no checksum. */
hoist_status hoist_load_plan(hoist_model* model, const hoist_load_options* options,
                             const hoist_plan* plan, hoist_loaded** out);
void hoist_plan_free(hoist_plan* plan);
/* Rank mode's exchange, the job's own (ncclAllGather, MPI_Allgather): fill `block`
 * (world * chunk_bytes bytes on this rank's device) with every rank's chunk r at
 * r * chunk_bytes; this rank's own is in place. Return 0, or nonzero to fail the load. */
typedef int (*hoist_all_gather_fn)(void* user, void* block, uint64_t chunk_bytes);
/* A rank's exchange that hoist can wait for: `start` begins it (ncclAllGather on a stream, an
 * MPI_Iallgather, a torch.distributed async_op) and returns 0, or nonzero to fail the load;
 * `poll` answers 1 once it has finished, 0 while it runs, negative if it failed (a collective
 * that completed with an error, was aborted or lost a peer has failed). hoist polls every few
 * milliseconds on the calling thread, so the wait keeps the stall timeout and ends on cancel
 * (the progress callback) and SIGINT/SIGTERM. A wait that ends before poll answered 1 (stalled,
 * cancelled, poll negative) leaves that exchange's block allocated until the process ends: the
 * exchange may still write into it. With poll NULL, start returns once the exchange has
 * finished, and no deadline can hold. */
typedef struct hoist_all_gather {
  hoist_all_gather_fn start;
  int (*poll)(void* user);
  void* user; /* passed to start and poll */
} hoist_all_gather;
/* Rank `rank` of a job of `world` processes, one device each (the options' device): loads this
 * rank's parts of `split` ("tensor" or "replicate", cut as hoist_model_cut cuts for `world`
 * devices with split_shares; with the options' names, of those tensors only). Its slices are
 * read; each tensor every rank holds whole is read 1/world by each rank and gathered by
 * `all_gather`. With world > 1 every rank also tells the others, through `all_gather` (blocks of
 * world * 256 bytes), whether its share loaded and how it was laid out, before the gather and
 * after it, even when its own share failed: every rank then returns HOIST_OK with every part
 * equal to the file's, or an error, naming the rank that failed and why in the others'
 * (a silent peer: HOIST_STALLED after the stall timeout). Every rank of the job must call it
 * with the same model, split, shares and names. start is called on the calling thread, up to
 * three times per load, each exchange finished before the next begins.
 * hoist_loaded_tensor(loaded, i) is this rank's part i, in hoist_model_cut's order of the parts
 * whose device is `rank`, all in one block the loaded model owns; hoist_loaded_verify compares
 * them with the file. */
hoist_status hoist_load_rank_ex(hoist_model* model, const hoist_load_options* options,
                                const char* split, uint32_t rank, uint32_t world,
                                const hoist_all_gather* all_gather, hoist_loaded** out);
/* hoist_load_rank_ex with an exchange that cannot be polled ({all_gather, NULL, user}). */
hoist_status hoist_load_rank(hoist_model* model, const hoist_load_options* options,
                             const char* split, uint32_t rank, uint32_t world,
                             hoist_all_gather_fn all_gather, void* user, hoist_loaded** out);
void* hoist_loaded_tensor(const hoist_loaded* loaded, size_t index); /* NULL if not loaded */
/* What part `index` of the load is (its destination: where it was loaded; NULL for a tensor not
 * loaded): for a load of whole tensors, tensor `index` whole on its device (device 0 when it
 * was not loaded). HOIST_INVALID_ARGUMENT for an index out of range. */
hoist_status hoist_loaded_part(const hoist_loaded* loaded, size_t index, hoist_part* out);
/* The index, in the options' device list, of the device that holds tensor `index`; -1 if it
 * was not loaded. */
int hoist_loaded_tensor_device(const hoist_loaded* loaded, size_t index);
hoist_status hoist_loaded_checksum(const hoist_loaded* loaded, size_t index, uint64_t* xxh3);
/* Reads every tensor back and compares it with the file: HOIST_VERIFY_MISMATCH if any differ. */
hoist_status hoist_loaded_verify(hoist_loaded* loaded, size_t* mismatches);
const char* hoist_loaded_report_json(const hoist_loaded* loaded);
void hoist_loaded_free(hoist_loaded* loaded);

/* A consumer-ordered reader: a model's whole tensors read into host memory ahead of the
 * requests of any number of threads, in the order the requests follow (file offsets, names or
 * natural key order), each tensor handed over for the caller to keep. The first request reads
 * only its tensor; what is read and not yet asked for stays within ahead_bytes; a request
 * outside it is read at once beside the read-ahead. Thread-safe. */
typedef struct hoist_reader hoist_reader;
/* One tensor's bytes in host memory, the caller's until hoist_host_tensor_free. */
typedef struct hoist_host_tensor hoist_host_tensor;

typedef struct hoist_reader_options {
  uint32_t struct_size;  /* set by hoist_reader_options_init */
  const size_t* tensors; /* the tensors it reads (indices); NULL: every tensor */
  size_t tensor_count;
  /* -1: pinned when a GPU is present (HOIST_PIN=on|off|auto changes it), 0: pageable, 1: pinned
   * where a GPU can pin. Pinned memory comes from slabs reused once freed, at most
   * HOIST_PINNED_MIB (8192) pinned at once; past it tensors are pageable. */
  int pinned;
  uint64_t ahead_bytes; /* 0: HOIST_AHEAD_MIB, 1024 MiB unless set */
} hoist_reader_options;

typedef struct hoist_reader_stats {
  uint64_t hits;   /* requests served from what was read ahead */
  uint64_t waits;  /* requests that waited for the read-ahead's batch holding them */
  uint64_t misses; /* requests read on their own */
  uint64_t batches;
  uint64_t read_bytes; /* read ahead */
} hoist_reader_stats;

void hoist_reader_options_init(hoist_reader_options* options);
/* The load options' threads, chunk, staging, stall timeout and direct I/O apply to its reads;
 * device, names and callbacks are not used. The model must outlive the reader. */
hoist_status hoist_reader_open(hoist_model* model, const hoist_load_options* load,
                               const hoist_reader_options* options, hoist_reader** out);
/* Tensor `index` once it has landed: *out is NULL while it has not within timeout_ms (ask again:
 * the read goes on). A failed read's error is the request's, naming the file, offset and
 * tensor; HOIST_CANCELLED once the reader is closed. */
hoist_status hoist_reader_take(hoist_reader* reader, size_t index, uint32_t timeout_ms,
                               hoist_host_tensor** out);
void hoist_reader_stats_get(const hoist_reader* reader, hoist_reader_stats* out);
/* Stops the read-ahead and waits for the reads in flight; tensors taken stay valid. */
void hoist_reader_close(hoist_reader* reader);
void* hoist_host_tensor_data(const hoist_host_tensor* tensor); /* NULL for zero bytes */
uint64_t hoist_host_tensor_size(const hoist_host_tensor* tensor);
int hoist_host_tensor_pinned(const hoist_host_tensor* tensor);
/* Any thread. Its pinned memory may be handed out again: after every copy out of it has
 * completed, or once the reuse hook has returned. */
void hoist_host_tensor_free(hoist_host_tensor* tensor);
/* Called on a reader thread before pinned memory of freed host tensors is handed out again; it
 * returns once every copy the caller started out of them has completed (a framework's
 * asynchronous copies that hoist cannot see). NULL: none. Process-wide; thread-safe. */
typedef void (*hoist_reuse_fn)(void* user);
void hoist_set_host_memory_reuse_hook(hoist_reuse_fn settle, void* user);

/* A model another process holds (`hoist serve`, docs/SERVE.md): attached in milliseconds,
 * from memory that outlives its holder. */
typedef struct hoist_attach_options {
  uint32_t struct_size; /* set by hoist_attach_options_init */
  const char* device;   /* NULL: the holder's devices; else one of them ("cuda:0") */
  /* 0: a private copy, made within the device; nonzero: the holder's memory itself, mapped
   * (one copy for every process), which the caller must not write. */
  int share;
  double timeout_s; /* for the holder's answer; 0: 10 s */
} hoist_attach_options;

void hoist_attach_options_init(hoist_attach_options* options);
/* Attaches to the model held under `name` (or at a holder's socket path, one holding a '/'):
 * *model describes its tensors (hoist_model_tensor: names, dtypes, shapes), *loaded holds them
 * (hoist_loaded_tensor: device pointers; hoist_loaded_verify compares them with the model's
 * files). Free *loaded before *model. What is attached stays valid when the holder exits.
 * HOIST_NOT_FOUND: nothing is held under that name; HOIST_INVALID_ARGUMENT: the holder refused
 * (another user's) or the device is not one it holds the model on; HOIST_IO_ERROR: the holder
 * went away while it answered; HOIST_STALLED: no answer within the timeout. */
hoist_status hoist_attach(const char* name, const hoist_attach_options* options,
                          hoist_model** model, hoist_loaded** loaded);

/* Copies, within the device, the tensors of `model` that this user's holder of its very files
 * (`hoist serve` of the same path, the files unchanged since `model` was opened) holds on
 * `device` ("cuda:0", "host") into the caller's memory there: destination(user, index, tensor)
 * gives where tensor `index` of `model` goes, or NULL for one not wanted from the holder; it is
 * called on this thread. *copied_bytes (may be NULL): the bytes copied. HOIST_NOT_FOUND when no
 * holder holds those files whole on that device (read them instead); HOIST_FILE_CHANGED when
 * the holder read another version of them or describes a tensor otherwise: nothing is copied
 * then. timeout_s: for the holder's answer; 0: 10 s. */
hoist_status hoist_attach_into(const hoist_model* model, const char* device, double timeout_s,
                               hoist_destination_fn destination, void* user,
                               uint64_t* copied_bytes);

/* What this user's holders hold, as JSON: {"held": [{"name", "model" (its absolute path or
 * URL), "socket", "pid", "uid", "devices", "bytes", "tensors"}, ...]} (a socket whose holder
 * is gone has "stale": true); NULL on failure (hoist_last_error). Valid until the calling
 * thread's next call of it. */
const char* hoist_held_models_json(void);

/* GPU loads keep their pinned staging memory (about 2 chunks per reader thread, 96 MiB by
 * default) for the next load in the process, which then starts without pinning any, and readers
 * keep the pinned slabs of freed host tensors. This unpins and frees both. Thread safe. */
void hoist_release_cached_memory(void);

const char* hoist_last_error(void);
const char* hoist_status_name(hoist_status status);
/* The library's version, "MAJOR.MINOR.PATCH". */
const char* hoist_version(void);

#ifdef __cplusplus
}
#endif

#endif /* HOIST_HOIST_H_ */
