// What a Gloo or c10d error says, in a user's words. Their messages carry the library's source
// path and line ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545]"), a
// paragraph of advice and a backtrace; a user needs what went wrong with which peer. The
// library's own reason stays in parentheses, for a search or a bug report.
#pragma once

#include <string>
#include <string_view>

namespace pipescope::exec {

// `message` (a c10::Error's what(), a gloo::IoException's, ...) as one line: its first line,
// without the source location and the advice, led by what happened when it is one of the
// failures a run meets (a peer that stopped or closed the connection, a timeout, a refused
// connection). Any other message comes back cleaned the same way.
std::string plain_transport_message(std::string_view message);

// c10d logs each retry and failure of its store with the C++ stack of the exception on stderr,
// before pprun's own line says what failed (and which rank): the library's log is set to fatal
// errors only, unless the user asked for a level with TORCH_CPP_LOG_LEVEL.
void keep_library_logs_quiet();

}  // namespace pipescope::exec
