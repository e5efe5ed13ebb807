// A small plain (non-pipeline) Chrome trace, as a profiler writes one: a named process, nested
// X slices, a B/E pair, an instant and a counter. Shared by the plain-trace model and painting tests.
#pragma once

namespace plain_trace_fixture {

constexpr const char* kNested = R"([
 {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "trainer"}},
 {"ph": "X", "name": "matmul", "pid": 3, "tid": 1, "ts": 10, "dur": 20, "args": {"flops": 1000}},
 {"ph": "X", "name": "forward", "pid": 3, "tid": 1, "ts": 10, "dur": 40},
 {"ph": "X", "name": "step", "pid": 3, "tid": 1, "ts": 0, "dur": 100},
 {"ph": "B", "name": "backward", "pid": 3, "tid": 1, "ts": 60},
 {"ph": "X", "name": "matmul", "pid": 3, "tid": 1, "ts": 62, "dur": 8},
 {"ph": "E", "pid": 3, "tid": 1, "ts": 90},
 {"ph": "i", "name": "marker", "pid": 3, "tid": 1, "ts": 95},
 {"ph": "C", "name": "queue", "pid": 3, "ts": 5, "args": {"value": 3}},
 {"ph": "C", "name": "queue", "pid": 3, "ts": 80, "args": {"value": 1}}
])";

}  // namespace plain_trace_fixture
