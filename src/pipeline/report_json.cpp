#include "pipeline/report_json.h"

#include "base/json_schema.h"

namespace hoist {

const char* IoModeName(IoMode mode) { return mode == IoMode::kDirect ? "direct" : "buffered"; }

nlohmann::ordered_json ReportToJson(const LoadReport& r) {
  // The device's open (a CUDA context: about 0.2 s, once per process) is reported apart, as
  // the peers' figures leave it out; wall_s runs from opening the model to the end.
  const double wall = r.wall_s + r.phases.open_parse;
  nlohmann::ordered_json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["device"] = r.device;
  j["tensor_count"] = r.tensors;
  j["bytes"] = r.tensor_bytes;
  j["read_bytes"] = r.read_bytes;
  j["gathered_bytes"] = r.gathered_bytes;
  j["read_into_destination_bytes"] = r.read_into_destination_bytes;
  j["decoded_on_device_bytes"] = r.decoded_on_device_bytes;
  j["wall_s"] = wall;
  j["gbps"] = wall > 0 ? static_cast<double>(r.tensor_bytes) / wall / 1e9 : 0.0;
  j["stream_gbps"] =
      r.phases.stream > 0 ? static_cast<double>(r.tensor_bytes) / r.phases.stream / 1e9 : 0.0;
  j["time_to_first_byte_s"] = r.phases.open_parse + r.phases.plan + r.phases.allocate;
  j["process_wall_s"] = wall + r.phases.device_open;
  j["phases"] = {{"open_parse_s", r.phases.open_parse},
                 {"device_open_s", r.phases.device_open},
                 {"plan_s", r.phases.plan},
                 {"allocate_s", r.phases.allocate},
                 {"allocate_device_s", r.phases.allocate_device},
                 {"allocate_staging_s", r.phases.allocate_staging},
                 {"stream_s", r.phases.stream},
                 {"teardown_s", r.phases.teardown}};
  // Where the readers' time went (thread-seconds): what bound the stream.
  j["reader_seconds"] = {{"read_s", r.readers.read},
                         {"copy_start_s", r.readers.copy_start},
                         {"copy_wait_s", r.readers.copy_wait},
                         {"buffer_wait_s", r.readers.buffer_wait},
                         {"destination_wait_s", r.readers.destination_wait},
                         {"destination_settle_s", r.readers.destination_settle},
                         {"total_s", r.readers.total}};
  j["decode"] = {{"tensors", r.decode.tensors},
                 {"busy_s", r.decode.busy},
                 {"after_stream_s", r.decode.after_stream}};
  j["staging"] = {{"buffers", r.staging_buffers},
                  {"buffer_bytes", r.staging_buffer_bytes},
                  {"bytes", r.staging_buffer_bytes * r.staging_buffers},
                  {"pinned", r.pinned_staging}};
  j["devices"] = nlohmann::ordered_json::array();
  for (const DeviceShare& d : r.devices) {
    j["devices"].push_back(
        {{"device", d.device},
         {"tensor_count", d.tensors},
         {"bytes", d.tensor_bytes},
         {"threads", d.threads},
         {"stream_s", d.stream_s},
         {"stream_gbps",
          d.stream_s > 0 ? static_cast<double>(d.tensor_bytes) / d.stream_s / 1e9 : 0.0}});
  }
  j["threads"] = r.threads;
  j["chunk_bytes"] = r.chunk_bytes;
  j["chunks"] = r.chunks;
  j["io"] = IoModeName(r.io);
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["fallbacks"] = r.fallbacks;
  j["source"] = {{"kind", r.source},
                 {"requests", r.source_counts.requests},
                 {"retries", r.source_counts.retries},
                 {"bytes", r.source_counts.bytes}};
  j["warnings"] = r.warnings;
  return j;
}

}  // namespace hoist
