/* hoist for llama.cpp: one call in place of llama_model_load_from_file.
 *
 * llama.cpp builds the model from the GGUF's metadata and allocates every tensor where its
 * placement puts it (llama_model_init_from_user); hoist then reads the tensors' bytes straight
 * into that memory: GPU buffers by device pointer (pinned staging, many copies in flight, never
 * a pageable page handed to a DMA engine), plain host buffers by pointer, and buffers that
 * transform what they are given (CPU repack, split buffers) through ggml_backend_tensor_set from
 * hoist's host memory. docs/LLAMA_CPP.md says more.
 *
 * Needs a libllama with third_party/llama.cpp's patch (optional tensors the metadata does not
 * list are not created; the caller's use_extra_bufts is kept): without it the model would
 * compute otherwise, so a libllama that creates a tensor the file lacks is refused.
 */
#ifndef HOIST_LLAMA_H_
#define HOIST_LLAMA_H_

#include <stdint.h>

#include <llama.h> /* llama.cpp's, not this file */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hoist_llama_options {
  uint32_t struct_size;   /* set by hoist_llama_options_init */
  int threads;            /* hoist's reader threads; 0: chosen from the machine */
  uint64_t chunk_bytes;   /* 0: hoist's default */
  double stall_timeout_s; /* 0: hoist's default (60 s) */
  int direct_io;          /* nonzero: bypass the page cache */
  /* 0: tensors a holder (`hoist serve` of the same file, unchanged, on the same device) holds
   * are copied from its memory within the device instead of read; nonzero: always read. */
  int no_holder;
} hoist_llama_options;

void hoist_llama_options_init(hoist_llama_options* options);

/* The model at `path` (a GGUF file, the first file of a split set, or any name hoist opens:
 * an http(s) URL, s3://, gs://, az://, hf://), as llama_model_load_from_file(path, params)
 * would build it, with every tensor's bytes read by hoist. params.progress_callback is called
 * as the bytes land; returning false cancels the load. NULL on failure: the reason is logged
 * through llama.cpp's log callback as one line and hoist_llama_last_error() gives it; nothing
 * stays allocated. options NULL: the defaults. Thread safety: as llama_model_load_from_file. */
struct llama_model* hoist_llama_load(const char* path, struct llama_model_params params,
                                     const hoist_llama_options* options);

/* The calling thread's last hoist_llama_load failure, "" if none; valid until its next call. */
const char* hoist_llama_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HOIST_LLAMA_H_ */
