/* A small engine's use of hoist: open a model, load it onto a device, and print each
 * tensor's device pointer and XXH3-64 checksum. Usage: load_model PATH [DEVICE] */
#include <inttypes.h>
#include <stdio.h>

#include "hoist/hoist.h"

static int on_progress(void* user, uint64_t done, uint64_t total) {
  (void)user;
  (void)done;
  (void)total;
  return 0; /* keep going */
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATH [DEVICE]\n", argv[0]);
    return 1;
  }
  hoist_model* model = NULL;
  hoist_status status = hoist_model_open(argv[1], &model);
  if (status != HOIST_OK) {
    fprintf(stderr, "load_model: %s\n", hoist_last_error());
    return (int)status;
  }
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = argc > 2 ? argv[2] : "auto";
  options.checksum = 1;
  options.progress = on_progress;
  hoist_loaded* loaded = NULL;
  status = hoist_load(model, &options, &loaded);
  if (status != HOIST_OK) {
    fprintf(stderr, "load_model: %s (%s)\n", hoist_last_error(), hoist_status_name(status));
    hoist_model_close(model);
    return (int)status;
  }
  for (size_t i = 0; i < hoist_model_tensor_count(model); ++i) {
    hoist_tensor_info info;
    uint64_t xxh3 = 0;
    if (hoist_model_tensor(model, i, &info) != HOIST_OK) continue;
    if (hoist_loaded_checksum(loaded, i, &xxh3) != HOIST_OK) continue;
    printf("%-40s %-6s %12" PRIu64 " bytes at %p  xxh3 %016" PRIx64 "\n", info.name, info.dtype,
           info.nbytes, hoist_loaded_tensor(loaded, i), xxh3);
  }
  printf("report: %s\n", hoist_loaded_report_json(loaded));
  hoist_loaded_free(loaded);
  hoist_model_close(model);
  return 0;
}
