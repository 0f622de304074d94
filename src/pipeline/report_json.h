// A load's report as JSON: the CLI's `load --json` summary and the C API's report.
#pragma once

#include <nlohmann/json.hpp>

#include "pipeline/loader.h"

namespace hoist {

const char* IoModeName(IoMode mode);
// Keys: device, tensor_count, bytes, read_bytes, gathered_bytes, read_into_destination_bytes,
// wall_s, gbps, stream_gbps, time_to_first_byte_s, phases{open_parse_s, device_open_s, plan_s,
// allocate_s, stream_s, teardown_s},
// staging{buffers, buffer_bytes, bytes, pinned}, threads, chunk_bytes, io, peak_rss_bytes,
// fallbacks[], warnings[]. wall_s and time_to_first_byte_s include open_parse but not
// device_open (a GPU context, once per process); process_wall_s includes both.
nlohmann::ordered_json ReportToJson(const LoadReport& report);

}  // namespace hoist
