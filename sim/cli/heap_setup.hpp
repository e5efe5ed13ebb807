// How ppsim's heap is set up before a command runs: simulations and plans build and drop arrays
// of millions of instructions, and the cost of the memory itself (the kernel faulting it in page
// by page) was a third of `ppsim simulate` of a large schedule (docs/BENCHMARKS.md).
#pragma once

namespace pipescope::cli {

// Keeps freed blocks in the heap for reuse instead of handing them back to the kernel, and asks
// for the heap to be backed by transparent huge pages (2 MiB pages fault in 512 times less
// often). Where the kernel gives no huge pages, the heap simply stays in small pages.
void prepare_heap_for_large_schedules();

}  // namespace pipescope::cli
